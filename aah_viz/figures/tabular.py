"""A figure's data as one long table (the CSV a figure downloads with): one row per plotted value."""

from __future__ import annotations

import numpy as np
import pandas as pd

from aah_viz.figures.payload import figure_data


def _flat(values) -> list:
    if values is None:
        return []
    return np.asarray(values, dtype=object).ravel().tolist()


def figure_frame(fig) -> pd.DataFrame:
    """Columns: panel (subplot title or axis), trace, x, y, value (heatmap cells and bar heights).

    Heatmaps become one row per cell; lines, markers and bars one row per point. Helper traces
    (``meta="helper"``: click targets, legend entries) are left out.
    """
    d = figure_data(fig)
    rows: list[pd.DataFrame] = []
    for i, tr in enumerate(d.get("data", [])):
        name = tr.get("name") or f"trace {i}"
        if tr.get("meta") == "helper":
            continue
        panel = tr.get("yaxis", "y")
        if tr.get("type") == "heatmap" and tr.get("z") is not None:
            z = np.asarray(tr["z"], dtype=np.float64)
            if z.ndim != 2:
                continue
            ys = tr.get("y") if tr.get("y") is not None else np.arange(z.shape[0])
            xs = tr.get("x") if tr.get("x") is not None else np.arange(z.shape[1])
            yy, xx = np.meshgrid(np.asarray(ys, dtype=object), np.asarray(xs, dtype=object), indexing="ij")
            cd = tr.get("customdata")
            value = z if cd is None or np.asarray(cd).shape[:2] != z.shape else np.asarray(cd)
            if value.ndim > 2:
                value = value[..., 0]
            rows.append(
                pd.DataFrame({"panel": panel, "trace": name, "x": xx.ravel(), "y": yy.ravel(), "value": value.ravel()})
            )
            continue
        x, y = _flat(tr.get("x")), _flat(tr.get("y"))
        n = max(len(x), len(y))
        if n == 0:
            continue
        x = x if len(x) == n else [None] * n
        y = y if len(y) == n else [None] * n
        rows.append(pd.DataFrame({"panel": panel, "trace": name, "x": x, "y": y, "value": y}))
    if not rows:
        return pd.DataFrame(columns=["panel", "trace", "x", "y", "value"])
    out = pd.concat(rows, ignore_index=True)
    titles = {}
    layout = d.get("layout", {})
    for k, v in layout.items():
        if k.startswith("yaxis") and isinstance(v, dict):
            t = v.get("title", {})
            titles["y" + k[5:]] = (t.get("text") if isinstance(t, dict) else t) or ("y" + k[5:])
    out["panel"] = out["panel"].map(lambda p: str(titles.get(p, p)).replace("<br>", " "))
    return out
