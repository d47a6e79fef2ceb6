"""A figure kind's options checked against the runs it draws, before anything is built.

``aah-viz figure --opt layer=9`` on a 4-layer run would otherwise draw an empty figure and exit 0;
here it is one line naming the layers the run has. Option names mean the same in every kind
(``FIGURE_OPTIONS``), so one rule per name covers them all.
"""

from __future__ import annotations

from aah_viz.errors import AAHVizError

PROBES = ("syntax", "coref", "sufficiency")
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _int(key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise AAHVizError(f"--opt {key}={value!r} must be a whole number")
    try:
        number = float(value)
    except ValueError:
        raise AAHVizError(f"--opt {key}={value} must be a whole number") from None
    if not number.is_integer():
        raise AAHVizError(f"--opt {key}={value} must be a whole number")
    return int(number)


def _within(key: str, value, count: int | None, noun: str, run) -> int:
    index = _int(key, value)
    if count is not None and not 0 <= index < int(count):
        raise AAHVizError(f"--opt {key}={index}: run {run.run_id} has {noun} 0-{int(count) - 1} ({count} in all)")
    if index < 0:
        raise AAHVizError(f"--opt {key}={index} must be 0 or more")
    return index


def _step(value, runs) -> int:
    step = _int("step", value)
    last = [r.manifest.get("last_step") for r in runs]
    last = [int(s) for s in last if isinstance(s, int) and not isinstance(s, bool)]
    if step < 0 or (last and step > max(last)):
        span = f"steps 0-{max(last)}" if last else "no recorded step"
        raise AAHVizError(f"--opt step={step}: the runs have {span}")
    return step


def check_options(runs, opts: dict) -> dict:
    """``opts`` with numbers and flags as their builders take them, or :class:`AAHVizError` in one line.

    Layers and heads are those of the first run (the one a single-run kind draws)."""
    runs = list(runs)
    first = runs[0] if runs else None
    out = dict(opts)
    for key, value in opts.items():
        if key == "layer" and first is not None:
            out[key] = _within(key, value, first.n_layer, "layers", first)
        elif key == "head" and first is not None:
            out[key] = _within(key, value, first.n_head, "heads", first)
        elif key == "step":
            out[key] = _step(value, runs)
        elif key in ("max_points", "max_columns"):
            out[key] = _int(key, value)
            if out[key] < 1:
                raise AAHVizError(f"--opt {key}={out[key]} must be 1 or more")
        elif key == "smoothing":
            try:
                out[key] = float(value)
            except (TypeError, ValueError):
                raise AAHVizError(f"--opt smoothing={value} must be a number from 0 to 0.99") from None
            if not 0.0 <= out[key] <= 0.99:
                raise AAHVizError(f"--opt smoothing={value} must be a number from 0 to 0.99")
        elif key in ("log_step", "robust", "log_y"):
            text = str(value).strip().lower()
            if text not in TRUE + FALSE:
                raise AAHVizError(f"--opt {key}={value} must be true or false")
            out[key] = text in TRUE
        elif key == "probe" and value not in PROBES:
            raise AAHVizError(f"--opt probe={value} is not a probe; choose one of {', '.join(PROBES)}")
    return out
