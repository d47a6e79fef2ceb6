"""``aah-viz regimes``: list every regime (a named set of config flags) and the size presets."""

from __future__ import annotations

from aah_viz.cli._json import json_text


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "regimes",
        help="list the model regimes and the flags that define each",
        description="List every AAH-v3 regime: a named set of config overrides applied on top of a size preset "
        "(AAHConfig.from_preset(size, regime=NAME, **overrides)). Regimes with a parameter take it as a keyword "
        "(fixed_window=W, static_window=W). Also lists the size presets.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def run(args) -> int:
    # instrumentation.config (the presets) needs no torch; the regimes are the light side's table.
    from aah_viz.regimes import regimes_table
    from instrumentation import PRESETS

    rows = regimes_table()
    presets = [
        {
            "name": n,
            "description": p.description,
            "values": {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.values.items()},
        }
        for n, p in PRESETS.items()
    ]
    if args.json:
        print(json_text({"regimes": rows, "presets": presets}, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        flags = ", ".join(f"{k}={v}" for k, v in r["flags"].items()) or "(base)"
        param = f"  [parameter: {r['parameter']}]" if r["parameter"] else ""
        print(f"{r['name']:<{width}}  {r['description']}\n{'':<{width}}  flags: {flags}{param}")
    print("\npresets: " + ", ".join(p["name"] for p in presets))
    return 0
