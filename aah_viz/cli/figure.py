"""``aah-viz figure RUN... --kind NAME --format pdf|svg|png --out FILE``: a dashboard figure as a file."""

from __future__ import annotations

import argparse
from pathlib import Path

from aah_viz.cli._options import add_runs_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "figure",
        help="export one of the dashboard's Plotly figures as PDF, SVG or PNG",
        description="Build a figure with the same builder the dashboard uses (the FIGURE_KINDS registry) and write "
        "it through Kaleido and a Chromium browser (Debian: apt-get install chromium; or set BROWSER_PATH). "
        "Run 'aah-viz figure --list' to see the kinds and their options.",
    )
    add_runs_argument(parser, nargs="*")
    parser.add_argument("--kind", help="figure kind (see --list)")
    parser.add_argument(
        "--format",
        dest="fmt",
        choices=("pdf", "svg", "png"),
        help="file format (default: the extension of --out, else pdf)",
    )
    parser.add_argument("--out", metavar="FILE", help="file to write")
    parser.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the figure kind, e.g. --opt layer=2 --opt step=500 (repeatable; or comma-separated: "
        "--opt layer=2,step=500)",
    )
    parser.add_argument("--width", type=int, help="width in pixels (default: the figure's own)")
    parser.add_argument("--height", type=int, help="height in pixels (default: the figure's own)")
    parser.add_argument("--scale", type=float, default=1.0, help="scale factor for PNG resolution (default 1)")
    parser.add_argument("--list", action="store_true", help="list the figure kinds and their options, then exit")
    parser.set_defaults(func=run)


def _pairs(items: list[str]) -> list[str]:
    """``--opt doc=0,layer=2`` is two options; a comma before a part without ``=`` belongs to the
    value (``--opt metrics=final_loss,final_acr``)."""
    out: list[str] = []
    for item in items:
        parts: list[str] = []
        for part in item.split(","):
            if parts and "=" not in part:
                parts[-1] += "," + part
            else:
                parts.append(part)
        out += parts
    return out


def _parse_opts(items: list[str]) -> dict:
    from aah_viz.errors import AAHVizError

    opts = {}
    for item in _pairs(items):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AAHVizError(f"--opt {item!r} must look like KEY=VALUE, e.g. --opt layer=2")
        value = value.strip()
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                continue
        opts[key.strip()] = value
    return opts


def run(args: argparse.Namespace) -> int:
    from aah_viz.errors import AAHVizError
    from aah_viz.figures import FIGURE_KINDS, FIGURE_OPTIONS

    if args.list:
        for name in FIGURE_KINDS:
            options = FIGURE_OPTIONS.get(name, {})
            text = "; ".join(f"{k}: {v}" for k, v in options.items()) or "no options"
            print(f"{name}  ({text})")
        return 0
    if not args.kind or not args.out or not args.runs:
        raise AAHVizError(
            "figure needs RUN..., --kind and --out (or --list); e.g. aah-viz figure "
            "runs/ --kind window_heatmap --out fig.pdf"
        )
    if args.kind not in FIGURE_KINDS:
        raise AAHVizError(f"unknown figure kind {args.kind!r}; choose one of {', '.join(FIGURE_KINDS)}")
    out = Path(args.out)
    fmt = args.fmt or (
        out.suffix.lstrip(".").lower() if out.suffix.lstrip(".").lower() in ("pdf", "svg", "png") else "pdf"
    )
    opts = _parse_opts(args.opt)
    known = FIGURE_OPTIONS.get(args.kind, {})
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise AAHVizError(
            f"figure kind {args.kind!r} takes no option(s) {unknown}; it takes {', '.join(known) or 'none'}"
        )
    from aah_viz.export.runs import collect_runs
    from aah_viz.export.static import find_browser, write_figure
    from aah_viz.figures.options import check_options

    runs = collect_runs(args.runs)
    opts = check_options(runs, opts)  # an option the runs cannot have is refused, never drawn empty
    find_browser()  # fail before building the figure when no browser is installed
    fig = FIGURE_KINDS[args.kind](runs, **opts)
    path = write_figure(fig, out, fmt, width=args.width, height=args.height, scale=args.scale)
    print(path)
    return 0
