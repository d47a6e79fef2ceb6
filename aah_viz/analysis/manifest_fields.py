"""A run's manifest as flat fields (``regime``, ``seed``, ``config.lr``, ``train.batch_size``, ...):
what the runs table sorts and filters by, what runs are grouped by, and the config diff of runs."""

from __future__ import annotations

# nested sections of the manifest that hold settings; each key becomes ``section.key``
SECTIONS = ("config", "train", "data", "backend", "recorder")
# top-level fields that are bookkeeping, not a setting to group or compare by
SKIP = {"schema_version", "software", "host", "started_at", "finished_at", "update_summaries", "run_uid"}
# fields that come first, in this order (the rest alphabetically)
FIRST = ("regime", "seed", "preset", "windows", "seq_len", "n_layer", "n_head", "steps", "status")


def _scalar(value):
    """A field value as something a table cell holds: lists as ``16, 32, 64``; dicts as None (flattened elsewhere)."""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return None
    return value


def flat_fields(manifest: dict) -> dict:
    """Top-level scalar fields, then each settings section's keys as ``section.key``."""
    out = {}
    for key, value in manifest.items():
        if key in SKIP or key in SECTIONS:
            continue
        if not isinstance(value, dict):
            out[key] = _scalar(value)
    for section in SECTIONS:
        sub = manifest.get(section)
        if isinstance(sub, dict):
            for key, value in sub.items():
                if not isinstance(value, dict):
                    out[f"{section}.{key}"] = _scalar(value)
    return out


def fields_frame(rows: list[dict]):
    """``rows`` (one dict per run) as a DataFrame whose columns of whole numbers stay whole numbers
    (``seed`` 0, ``config.n_embd`` 128, never 0.0 and 128.0) where some runs lack the field: pandas'
    nullable ``Int64``; a column holding any fraction or text keeps pandas' own type."""
    import numbers

    import pandas as pd

    frame = pd.DataFrame(rows)
    for column in frame.columns:
        values = [row[column] for row in rows if column in row and row[column] is not None]
        values = [v for v in values if not (isinstance(v, float) and v != v)]  # NaN: a missing value
        if values and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
            frame[column] = frame[column].astype("Int64")
    return frame


def field_order(fields) -> list[str]:
    """The known fields first (regime, seed, ...), then the others alphabetically."""
    fields = list(dict.fromkeys(fields))
    first = [f for f in FIRST if f in fields]
    return first + sorted(f for f in fields if f not in first)


def differing(rows: dict[str, dict]) -> list[str]:
    """The fields whose values are not the same for every run (a field a run lacks counts as empty)."""
    keys = field_order(k for row in rows.values() for k in row)
    return [k for k in keys if len({repr(row.get(k)) for row in rows.values()}) > 1]


def diff_summary(rows: dict[str, dict]) -> dict[str, list]:
    """The differing fields of runs sorted for a reader: ``values`` (every run has the field, the values
    differ), ``partial`` (some runs lack it: runs of other kinds, older versions), and ``same_as`` (field ->
    the first field shown of the same name whose values agree run by run: ``config.regime`` beside
    ``regime``), left out. Fields of different names are never folded, whatever their values: two settings
    that happen to agree over these runs (two flags both on in one run, off in the other) are two settings."""
    values, partial, same_as, seen = [], [], {}, {}
    for field in differing(rows):
        column = (field.rsplit(".", 1)[-1], tuple(repr(row.get(field)) for row in rows.values()))
        if column in seen:
            same_as[field] = seen[column]
            continue
        seen[column] = field
        (values if all(field in row for row in rows.values()) else partial).append(field)
    return {"values": values, "partial": partial, "same_as": same_as}


OPERATORS = ("<=", ">=", "!=", "<", ">", "=")


def matches(values, expr: str):
    """Which of ``values`` (a pandas Series) pass a filter typed by a user: ``<4.2``, ``>=0.3``,
    ``=full_adaptive``, ``!=0`` (numbers compare as numbers, other values as text), or plain text
    (found anywhere in the value, any case). An empty filter passes everything."""
    import pandas as pd

    expr = (expr or "").strip()
    if not expr:
        return pd.Series(True, index=values.index)
    op = next((o for o in OPERATORS if expr.startswith(o)), None)
    text = values.astype(str).where(values.notna(), "")
    if op is None:
        return text.str.contains(expr, case=False, regex=False)
    target = expr[len(op) :].strip()
    numbers = pd.to_numeric(values, errors="coerce")
    try:
        bound = float(target)
    except ValueError:
        bound = None
    if bound is not None and numbers.notna().any():
        left = numbers
    else:
        left, bound = text, target
    if op in ("=", "!="):
        hit = left == bound if left is not text else text.str.casefold() == str(bound).casefold()
        return ~hit if op == "!=" else hit
    compare = {"<": left.lt, ">": left.gt, "<=": left.le, ">=": left.ge}[op]
    return compare(bound).fillna(False).astype(bool)
