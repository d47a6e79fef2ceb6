"""Static figure export (PNG, SVG, PDF) of Plotly figures through Kaleido and a Chromium browser.

The browser is found here, once, in this order: the ``browser`` argument, the ``BROWSER_PATH``
environment variable (Kaleido's own override), then ``chromium`` / ``chromium-browser`` /
``google-chrome`` on ``PATH`` (Debian's package puts ``/usr/bin/chromium`` there). When none is
found, one :class:`~aah_viz.errors.MissingDependencyError` says how to install one; Kaleido's own
download is never attempted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aah_viz.errors import AAHVizError, MissingDependencyError

FIGURE_FORMATS = ("png", "svg", "pdf")
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
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


async def _render_all(items, browser: str) -> list[bytes]:
    kaleido = _kaleido()
    out = []
    async with kaleido.Kaleido(n=1, path=browser) as k:
        for fig, opts in items:
            out.append(await k.calc_fig(fig, opts=opts))
    return out


def _run(coro_factory):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    # called from inside an event loop (a notebook, a server): render on a thread of its own
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(coro_factory())).result()


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
        items.append((fig, opts))
    try:
        data = _run(lambda: _render_all(items, path))
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
    return [bytes(b) for b in data]


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
