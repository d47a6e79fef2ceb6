"""The selected run's summary at the top of every page: warnings first, then regime, progress, ACR,
stability and controller health, each metric with its glossary tooltip.

Banners (the zero-gradient note, then those the caller lists: ``page_head.RUN_BANNERS``) are drawn
first, in that order.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from aah_viz.dashboard import cache
from aah_viz.dashboard.common import plain
from aah_viz.dashboard.glossary import help_text
from aah_viz.regimes import NO_CHOICE_MODES, REGIMES

# fn(root, key, token, manifest) -> (short, details) or None: a warning about the run in a few words (all
# of them share one line at the top of the page) and its full text (shown on demand)
Banner = Callable[[str, str, int, dict], "tuple[str, str] | None"]
FULL_READ_PAGES = ("Stability",)


def has_controller(manifest: dict) -> bool:
    """Whether a window controller chooses this run's windows (no: full attention, static windows,
    fixed or random window ablations)."""
    cfg = manifest.get("config") or {}
    regime = REGIMES.get(str(manifest.get("regime")))
    if (regime is not None and not regime.controller) or cfg.get("enabled") is False:
        return False
    return cfg.get("window_ablation_mode", "adaptive") not in NO_CHOICE_MODES


def controller_state(root: str, key: str, token: int, manifest: dict, full: bool = False) -> str:
    """``none`` (no controller), ``unlogged``, ``zero`` (no gradient at any logged step) or ``learning``."""
    overview = cache.overview(root, key, token)
    if not has_controller(manifest) or overview.get("probe_only"):
        return "none"  # a model probed or profiled here trained no controller, whatever its regime says
    # the run's summary keeps the counts (no scalar read); older summaries: the series the page reads anyway when
    # it holds every step, else the scalars
    counts = overview.get("controller_grad")
    if counts is None and full:
        series = cache.controller(root, key, token)["series"]
        if not series.attrs.get("sampled"):
            grad = series[series["name"] == "controller_grad_norm"]["value"].abs() if not series.empty else series
            counts = len(grad), bool(len(grad)) and float(grad.max()) != 0.0
    logged, moved = counts if counts is not None else cache.controller_grad(root, key, token)
    if logged == 0:
        return "unlogged"
    return "learning" if moved else "zero"


def zero_gradient_note(root: str, key: str, token: int, manifest: dict, full: bool = False) -> tuple[str, str] | None:
    if controller_state(root, key, token, manifest, full) != "zero":
        return None
    return (
        "**Routing does not learn** (gradient 0)",
        "**Routing does not learn:** the controller's gradient norm is zero at every logged step, so its "
        "window choices are a fixed random function of drifting statistics (as in the reference). "
        "See Stability → controller health.",
    )


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{float(value):.{digits}f}"


def _progress(overview: dict, manifest: dict) -> str:
    last, total = overview.get("steps"), manifest.get("steps")
    if last is None:
        return "no step yet"
    if isinstance(total, int) and total > 0:
        return f"{last + 1:,} / {total:,} steps ({min(1.0, (last + 1) / total):.0%})"
    return f"step {last:,}"


def _stability(root: str, key: str, token: int, full: bool = False) -> tuple[str, str | None]:
    layers = cache.stability(root, key, token)["layers"] if full else cache.stability_layers(root, key, token)
    if layers.empty or "mean_ari" not in layers or layers["mean_ari"].isna().all():
        if not layers.empty and "window_switch_share" in layers and layers["window_switch_share"].notna().any():
            return f"{layers['window_switch_share'].mean():.0%} switch", "window_switch_share"
        return "no routing", None
    return f"ARI {layers['mean_ari'].mean():.2f}", "mean_ari"


def header(root: str, key: str, token: int, manifest: dict, page: str | None = None, banners=()) -> None:
    """One line of warnings (the zero-gradient one first, then ``banners``, each in a few words, the full texts behind
    **Details**), then one line about the run: regime, seed, status and progress, ACR, causal-pair
    coverage, stability, controller; the glossary's definitions in its ? tooltip. On the pages that read
    a run's whole stability and controller tables anyway, the header takes its figures from those reads;
    elsewhere it reads only the few columns it shows."""
    full = page in FULL_READ_PAGES
    notes = [zero_gradient_note(root, key, token, manifest, full)]
    notes += [banner(root, key, token, manifest) for banner in banners]
    notes = [n for n in notes if n]
    if notes:
        c1, c2 = st.columns([7, 1], vertical_alignment="center")
        c1.warning(" · ".join(short for short, _ in notes), icon="⚠️")
        with c2.popover("Details", width="stretch"):
            for _, details in notes:
                st.markdown(details)
    o = cache.overview(root, key, token)
    seed = "" if o.get("seed") is None else f", seed {o['seed']}"
    value, _ = _stability(root, key, token, full)
    state = controller_state(root, key, token, manifest, full)
    shown = {"none": "none", "unlogged": "not logged", "zero": "grad = 0", "learning": "grad > 0"}[state]
    facts = [
        f"**{plain(o.get('regime'))}**{plain(seed)}",
        f"{plain(o.get('status') or '?')}: {_progress(o, manifest)}",
        f"ACR {_fmt(o.get('final_acr'))}",
        f"causal-pair coverage {_fmt(o.get('final_causal_coverage'))}",
        f"stability {value}",
        f"controller {shown}",
    ]
    terms = ("status", "acr", "causal_coverage", "ari", "controller_grad_norm")
    st.caption(" · ".join(facts), help="\n\n".join(help_text(t) for t in terms))
