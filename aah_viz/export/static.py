"""Static figure export (PNG, SVG, PDF) of Plotly figures through Kaleido and a Chromium browser.

The browser is found here, once, in this order: the ``browser`` argument, the ``BROWSER_PATH``
environment variable (Kaleido's own override), then ``chromium`` / ``chromium-browser`` /
``google-chrome`` on ``PATH`` (Debian's package puts ``/usr/bin/chromium`` there). When none is
found, one :class:`~aah_viz.errors.MissingDependencyError` says how to install one; Kaleido's own
download is never attempted.

Starting the browser is most of an export's time (seconds; about 20 on a loaded machine), so one
browser per path stays open for the life of the process (a dashboard's downloads, a script's many
figures) and renders one figure at a time; it closes at exit. A legend laid out in a row under the
plot, sized for a wide screen, runs off a file's fixed width: the export lays it out as a column
(``fit_for_export``), which the figure's bottom margin then grows to hold.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aah_viz.errors import AAHVizError, MissingDependencyError
from aah_viz.export.pdf_info import plain_title, with_title

FIGURE_FORMATS = ("png", "svg", "pdf")
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
START_TIMEOUT_S = 600  # a deadline for a browser that never answers, far beyond a slow start
RENDER_TIMEOUT_S = 600
MAGIC = {"png": (b"\x89PNG\r\n\x1a\n",), "pdf": (b"%PDF",), "svg": (b"<svg", b"<?xml")}
INSTALL_HINT = (
    "install one (Debian/Ubuntu: `apt-get install chromium`), or point BROWSER_PATH at a Chrome/Chromium "
    "executable (for example one fetched with `kaleido_get_chrome`)"
)


def find_browser(browser: str | os.PathLike | None = None) -> str:
    """Path of the Chromium-family browser Kaleido will drive, or :class:`MissingDependencyError`."""
    if browser is not None:
        path = Path(browser)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise MissingDependencyError(f"browser {str(browser)!r} is not an executable file; {INSTALL_HINT}")
    env = os.environ.get("BROWSER_PATH")
    if env:
        if Path(env).is_file() and os.access(env, os.X_OK):
            return env
        raise MissingDependencyError(f"BROWSER_PATH={env!r} is not an executable file; unset it or {INSTALL_HINT}")
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise MissingDependencyError(
        "static figure export needs a Chromium-family browser and none was found (looked for "
        + ", ".join(BROWSER_NAMES)
        + " on PATH and the BROWSER_PATH variable); "
        + INSTALL_HINT
    )


def _kaleido():
    try:
        import kaleido  # noqa: PLC0415 - optional extra
    except ImportError:
        raise MissingDependencyError(
            "static figure export needs kaleido >= 1.0: pip install 'aah-viz[export]' (or pip install kaleido)"
        ) from None
    return kaleido


def _check_format(fmt: str) -> str:
    fmt = str(fmt).lower().lstrip(".")
    if fmt not in FIGURE_FORMATS:
        raise AAHVizError(f"unknown figure format {fmt!r}; choose one of {', '.join(FIGURE_FORMATS)}")
    return fmt


class _Renderer:
    """A Kaleido (one Chromium tab) kept open on an event loop of its own thread."""

    def __init__(self, browser: str):
        kaleido = _kaleido()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="aah-viz-kaleido", daemon=True)
        self.thread.start()

        async def _open():
            k = kaleido.Kaleido(n=1, path=browser)
            await k.__aenter__()
            return k

        try:
            self.kaleido = self._call(_open(), START_TIMEOUT_S)
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def render(self, fig, opts: dict) -> bytes:
        return self._call(self.kaleido.calc_fig(fig, opts=opts), RENDER_TIMEOUT_S)

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=START_TIMEOUT_S)

    def close(self) -> None:
        try:
            self._call(self.kaleido.__aexit__(None, None, None), START_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - closing a browser that already died
            pass
        self._stop_loop()


_RENDERERS: dict[str, _Renderer] = {}
_LOCK = threading.Lock()  # one figure at a time per process: the tab renders them in turn


def _close_renderers() -> None:
    with _LOCK:
        while _RENDERERS:
            _RENDERERS.popitem()[1].close()


atexit.register(_close_renderers)


def _render_all(items, browser: str) -> list[bytes]:
    """Render with the browser's open renderer; a renderer whose browser died is replaced once."""
    with _LOCK:
        out = []
        for fig, opts in items:
            for attempt in (0, 1):
                renderer = _RENDERERS.get(browser)
                if renderer is None:
                    renderer = _RENDERERS[browser] = _Renderer(browser)
                try:
                    out.append(renderer.render(fig, opts))
                    break
                except Exception:
                    _RENDERERS.pop(browser, None)
                    renderer.close()
                    if attempt:
                        raise
        return out


ENTRY_PX = 30  # a legend entry's height in a column (a line with markers at font size 11), and some room


def fit_for_export(fig):
    """A copy of ``fig`` whose legend fits a file's fixed width: a legend laid out in a row (sized for
    the dashboard's wide screen) becomes a column under its title, left-aligned where it was, and the
    figure grows under its plot to hold every entry (a file cannot scroll; 14 runs' column was cut off and
    took its room from the plot)."""
    if not hasattr(fig, "layout"):  # a figure dict: Kaleido's to lay out
        return fig
    out = copy.deepcopy(fig)
    legend, margin = out.layout.legend, out.layout.margin
    if legend.orientation == "h":
        entries = sum(1 for t in out.data if t.showlegend is not False and t.name)
        top, bottom = (100 if margin.t is None else margin.t), (80 if margin.b is None else margin.b)
        plot = (out.layout.height or 450) - top - bottom
        below = -legend.y * plot if legend.y is not None and legend.y < 0 else 0.0
        room = int(below + ENTRY_PX * entries + 20)
        out.update_layout(
            legend=dict(orientation="v", title_side="top", x=0, xanchor="left"),
            height=top + plot + max(room, bottom),
            margin_b=max(room, bottom),
        )
    # every entry shown, the margin grown where it still must (a page's legend may scroll past its rows)
    out.update_layout(legend_maxheight=None, margin_autoexpand=True)
    return out


def figures_bytes(
    figures: Sequence[tuple[Any, str]],
    *,
    width: int | None = None,
    height: int | None = None,
    scale: float = 1.0,
    browser: str | None = None,
) -> list[bytes]:
    """Render several ``(figure, format)`` pairs with one browser session."""
    path = find_browser(browser)
    _kaleido()
    from kaleido import errors as kaleido_errors  # noqa: PLC0415 - optional extra

    items = []
    for fig, fmt in figures:
        opts: dict[str, Any] = {"format": _check_format(fmt), "scale": scale}
        if width:
            opts["width"] = int(width)
        if height:
            opts["height"] = int(height)
        items.append((fit_for_export(fig), opts))
    try:
        data = _render_all(items, path)
    except kaleido_errors.ChromeNotFoundError as err:
        raise MissingDependencyError(f"Kaleido could not start the browser at {path}: {err}; {INSTALL_HINT}") from None
    except kaleido_errors.BrowserFailedError as err:
        raise MissingDependencyError(
            f"the browser at {path} failed to start ({err}); it may lack system libraries: {INSTALL_HINT}"
        ) from None
    for (_fig, opts), blob in zip(items, data):
        if not isinstance(blob, (bytes, bytearray)) or not any(
            bytes(blob).lstrip().startswith(m) for m in MAGIC[opts["format"]]
        ):
            raise AAHVizError(f"Kaleido returned no valid {opts['format']} data; re-run, or export to another format")
    out = [bytes(b) for b in data]
    for i, (fig, opts) in enumerate(items):
        if opts["format"] == "pdf":  # the figure's title, not Kaleido's page title ("Kaleido-fier")
            out[i] = with_title(out[i], figure_title(fig))
    return out


def figure_title(fig) -> str:
    """The figure's title as plain text (a PDF's document title), else a name that says what it is."""
    layout = fig.layout if hasattr(fig, "layout") else (fig or {}).get("layout", {})
    title = layout.title.text if hasattr(layout, "title") else ((layout.get("title") or {}).get("text"))
    return plain_title(title) or "aah-viz figure"


def figure_bytes(
    fig,
    fmt: str,
    *,
    width: int | None = None,
    height: int | None = None,
    scale: float = 1.0,
    browser: str | None = None,
) -> bytes:
    """The figure as PNG, SVG or PDF bytes."""
    return figures_bytes([(fig, fmt)], width=width, height=height, scale=scale, browser=browser)[0]


def write_figure(fig, path: str | os.PathLike, fmt: str | None = None, **opts) -> Path:
    """Write the figure to ``path``; ``fmt`` defaults to the file's extension. Atomic: temp file, rename."""
    path = Path(path)
    fmt = _check_format(fmt or path.suffix.lstrip(".") or "png")
    data = figure_bytes(fig, fmt, **opts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
