"""Frontier: perplexity against compute for a pretrained model (``aah-viz frontier``), one point per
configuration with its interval over blocks, the Pareto front marked, and the table behind it."""

from __future__ import annotations

import posixpath
from urllib.parse import quote

import pandas as pd
import streamlit as st

from aah_viz.analysis.frontier import (
    ROUTED_FAMILIES,
    SETTLED_WITHIN,
    adaptation_curves,
    against_nearest_static,
    event_details,
    first_token_profile,
    frontier_table,
    seed_spread,
    sink_effects,
    window_shares,
)
from aah_viz.dashboard import address, cache, guide, session
from aah_viz.dashboard.common import chart, data_downloads, guarded, plain, show_table
from aah_viz.errors import AAHVizError
from aah_viz.figures.frontier import adaptation_figure, frontier_figure, point_labels
from aah_viz.runlog import discover_runs, read_manifest

REGIME = "frontier"  # the regime a frontier run's manifest names
SHOWN = {
    "configuration": "configuration",
    "on_chart": "on the chart",
    "ppl": "perplexity",
    "ppl_lo": "perplexity low (95%)",
    "ppl_hi": "perplexity high (95%)",
    "acr": "ACR",
    "acr_causal": "causal coverage",
    "speed_vs_unpatched": "speed vs unpatched",
    "speed_lo": "speed low (95%)",
    "speed_hi": "speed high (95%)",
    "adapt_steps": "adaptation steps",
    "sink_tokens": "sink tokens",
    "retrieval": "passkey retrieved",
    "pareto": "Pareto",
}


# one number format per column of the table
FORMATS = {
    "perplexity": "%.2f",
    "perplexity low (95%)": "%.2f",
    "perplexity high (95%)": "%.2f",
    "ACR": "%.3f",
    "causal coverage": "%.3f",
    "speed vs unpatched": "%.2f",
    "speed low (95%)": "%.2f",
    "speed high (95%)": "%.2f",
    "adaptation steps": "%d",
    "passkey retrieved": "%.2f",
}


def speed_caption(found: list[dict]) -> str:
    """What the speed column is, and how far to trust it: the timing pairs behind its medians and the run's
    own warning about them (a median of two pairs can read 2.5 times faster on a busy machine)."""
    timed = [d.get("speed_vs_unpatched") or {} for d in found if d.get("family") != "unpatched"]
    pairs = sorted({int(t["n_pairs"]) for t in timed if t.get("n_pairs")})
    text = (
        "Speed: the unpatched model's forward time over the configuration's, the median of pairs timed side by "
        "side in the same run, with its 95% interval."
    )
    if not pairs:
        return text
    text += f" Each median here comes from {' or '.join(map(str, pairs))} timing pairs"
    warnings = sorted({t["warning"] for t in timed if t.get("warning")})
    if warnings:
        text += (
            f" (the run warns: {'; '.join(warnings)}): read the column as a rough indication; "
            "`aah-viz bench retrofit` times speed properly"
        )
    return text + "."


def not_evaluated(manifest: dict, t: pd.DataFrame) -> list[str]:
    """The configurations the frontier planned (its manifest) that have no row yet: a run stopped midway."""
    planned = (manifest.get("frontier") or {}).get("configurations") or []
    done = set(t["configuration"])
    return [c for c in planned if c not in done]


def any_frontier(root: str) -> bool:
    """Whether a run under ``root`` is a frontier, from the manifests (no Streamlit cache: the entry
    point asks before the page it opens on draws anything)."""
    for path in discover_runs(root):
        try:
            if read_manifest(path).get("regime") == REGIME:
                return True
        except AAHVizError:
            continue
    return False


def frontier_keys() -> list[str]:
    views = session.overviews()
    return [k for k in session.good_keys() if views[k].get("regime") == REGIME]


@st.cache_data(show_spinner=False)
def details(root: str, key: str, token: int) -> list[dict]:
    """The ``inference`` details of a frontier run (one per configuration evaluated)."""
    return event_details(cache.open_run(root, key).events("inference"))


@st.cache_data(show_spinner=False)
def table(root: str, key: str, token: int) -> pd.DataFrame:
    asked = event_details(cache.open_run(root, key).events("retrieval"))  # passkey answers, where asked
    return frontier_table(details(root, key, token), asked)


@st.cache_data(show_spinner=False)
def profile(root: str, key: str, token: int) -> dict | None:
    return first_token_profile(event_details(cache.open_run(root, key).events("profile")))


def adapted_runs(key: str, found: list[dict]) -> list[str]:
    """The run keys of the adaptations a frontier names (``adapt_run``, beside the frontier run) that
    are under the logs root, in the frontier's order."""
    out = []
    good = set(session.good_keys())
    for d in found:
        name = d.get("adapt_run")
        if d.get("family") != "adapted" or not name:
            continue
        candidate = posixpath.normpath(posixpath.join(posixpath.dirname(key), str(name)))
        if candidate in good and candidate not in out:
            out.append(candidate)
    return out


def _md(text) -> str:
    """Run and configuration names inside generated Markdown: no character acts as Markdown."""
    return plain(str(text))


def _verdict(lo: float, hi: float) -> str:
    if lo > 1:
        return "higher perplexity"
    if hi < 1:
        return "lower perplexity"
    return "no clear difference"


def findings_markdown(
    t: pd.DataFrame, compared: list[dict], shares: dict, first_token: dict | None, profiled: str | None, maps: list[str]
) -> str:
    """The page's answer and its reason, in words made from the run's own numbers."""
    front = t[t["pareto"].astype(bool)].sort_values("acr")
    routed = set(t.loc[t["family"].isin(ROUTED_FAMILIES), "configuration"])
    on_front = [c for c in front["configuration"] if c in routed]
    lines = [
        f"**Answer.** {len(front)} of {len(t)} configurations are on the Pareto front (no other has both a "
        f"lower ACR and a lower perplexity): {_md(', '.join(front['configuration']))}. "
        + (
            f"AAH configurations on it: {_md(', '.join(on_front))}."
            if on_front
            else f"None of the {len(routed)} AAH configurations is on it."
        )
    ]
    if compared:
        worse = sum(c["ratio_lo"] > 1 for c in compared)
        better = sum(c["ratio_hi"] < 1 for c in compared)
        lines.append(
            f"Against the static window of nearest ACR, on the same {compared[0]['n_blocks']} blocks (perplexity "
            f"ratio AAH / static, 95% paired bootstrap interval): {worse} of {len(compared)} AAH configurations "
            f"have a higher perplexity, {better} a lower one."
        )
        lines += [
            f"- {_md(c['configuration'])} (ACR {c['acr']:.3f}, perplexity {c['ppl']:.2f}) against "
            f"{_md(c['static'])} (ACR {c['static_acr']:.3f}, perplexity {c['static_ppl']:.2f}): ratio "
            f"{c['ratio']:.2f} [{c['ratio_lo']:.2f}, {c['ratio_hi']:.2f}], {_verdict(c['ratio_lo'], c['ratio_hi'])}."
            for c in compared
        ]
    lines += _sinks_and_passkey(t)
    why = []
    if first_token is not None:
        over = first_token.get("heads_over_half")
        heads = first_token.get("heads")
        why.append(
            f"In the profile of {_md(profiled)} (aah-viz profile"
            + (f", T = {first_token['seq_len']}" if first_token.get("seq_len") else "")
            + f"), queries beyond {first_token.get('from')} tokens put {first_token['share']:.1%} of their "
            "attention on the block's first token"
            + (f" ({over} of {heads} heads more than half)" if over is not None and heads else "")
            + ": every window shorter than the query's position drops that mass."
        )
    for name, share in shares.items():
        parts = ", ".join(f"{w} tokens {v:.0%}" for w, v in share.items())
        why.append(f"Heads per window in {_md(name)}: {parts}.")
    if why:
        lines.append("**Why.** " + why[0])
        lines += [f"- {w}" for w in why[1:]]
    links = [f"[window map of {_md(k)}](/windows?run={quote(k, safe='')})" for k in maps]
    links.append(f"[what these numbers can and cannot show (docs/real-model.md)]({guide.link('real-model')})")
    lines.append("See: " + "; ".join(links) + ".")
    return "\n\n".join(lines).replace("\n\n- ", "\n- ")  # each list tight under its sentence


def _curve_line(name: str, c: dict, in_table: float | None) -> str:
    steps = f"step {int(c['curve'][0][0])} to {int(c['curve'][-1][0])}"
    if not c["improved"]:
        verdict = "no improvement (the last is not below the first)"
    elif c["settled"]:
        verdict = f"improved, and had stopped improving (the last within {SETTLED_WITHIN:.0%} of the one before)"
    else:
        verdict = "improved, and was still falling, so more steps would change its row"
    table = f"; in the table: {in_table:.2f}" if in_table is not None else ""
    return f"- {_md(name)}: {c['first']:.2f} → {c['last']:.2f} ({steps}): {verdict}{table}."


def adaptation_markdown(
    curves: dict[str, dict], spread: list[dict], table: pd.DataFrame, eval_batches: dict[str, int] | None = None
) -> str:
    """Each adapted configuration's adaptation in words: what its validation curve did, where that curve is
    measured (not where the table is), which adapted rows recorded none, and the spread over seeds."""
    parts = []  # paragraphs: a list's lines are joined by one newline, paragraphs by a blank line
    adapted = table.loc[table["family"] == "adapted", "configuration"].tolist()
    ppl = dict(zip(table["configuration"], table["ppl"]))
    if curves:
        without = [c for c in adapted if c not in curves]
        parts.append(
            f"**Adaptation.** {len(curves)} of {len(adapted) or len(curves)} adapted configurations recorded the "
            "validation perplexity of their adaptation run"
            + (f" ({_md(', '.join(without))} did not)" if without else "")
            + ": first → last evaluation."
        )
        parts.append("\n".join(_curve_line(name, c, ppl.get(name)) for name, c in curves.items()))
        batches = sorted(set((eval_batches or {}).values()))
        where = f"{' or '.join(map(str, batches))} evaluation batches" if batches else "a few evaluation batches"
        blocks = int(table["n_blocks"].max()) if "n_blocks" in table else None
        parts.append(
            f"These curves are each adaptation run's own validation perplexity, on its {where} of the adaptation "
            "text; the table's perplexity is the frontier's"
            + (f" {blocks}" if blocks else "")
            + " held-out blocks, the same for every configuration. Their levels differ: compare a curve with "
            "itself (did the adaptation still improve?), and configurations in the table."
        )
    if spread:
        parts.append(
            "\n".join(
                f"- {_md(g['configuration'])} over {g['n_seeds']} seeds: perplexity {g['mean']:.2f} ± {g['sd']:.2f} "
                f"(sd; {', '.join(f'{v:.2f}' for v in g['ppl'])})."
                for g in spread
            )
        )
    return "\n\n".join(parts)


def _eval_batches(key: str, found: list[dict]) -> dict[str, int]:
    """configuration -> the evaluation batches its adaptation run averaged (its manifest), where it is here."""
    out, good = {}, set(session.good_keys())
    for d in found:
        name = d.get("adapt_run")
        if d.get("family") != "adapted" or not name:
            continue
        run = posixpath.normpath(posixpath.join(posixpath.dirname(key), str(name)))
        if run in good:
            root = session.logs_root()
            n = (cache.manifest(root, run, session.token(run)).get("retrofit") or {}).get("eval_batches")
            if n:
                out[d["configuration"]] = int(n)
    return out


def _adaptation(key: str, found: list[dict], t: pd.DataFrame) -> None:
    curves = adaptation_curves(found)
    if not curves:
        return
    st.markdown(adaptation_markdown(curves, seed_spread(t), t, _eval_batches(key, found)))
    chart(
        adaptation_figure(
            {k: c["curve"] for k, c in curves.items()},
            "each adaptation run's validation perplexity by step (its own evaluation batches)",
        ),
        key="frontier_adaptation",
        name="frontier-adaptation",
    )


def _sinks_and_passkey(t: pd.DataFrame) -> list[str]:
    """What keeping the first tokens changes, and which configurations still find the passkey, in words."""
    lines = []
    effects = sink_effects(t)
    if effects:
        lines.append(
            "**Sink tokens.** Keeping the first positions visible to every query besides its window "
            "(perplexity, and as a multiple of full attention's):"
        )
        lines += [
            f"- {_md(e['configuration'])}: {e['ppl']:.2f} (x{e['x_full']:.2f}) at ACR {e['acr']:.3f} without, "
            f"{e['ppl_sinks']:.2f} (x{e['x_full_sinks']:.2f}) at ACR {e['acr_sinks']:.3f} with {e['sinks']}."
            for e in effects
        ]
    asked = t[t["retrieval"].notna()] if "retrieval" in t else t.iloc[0:0]
    if len(asked):
        n = int(asked["retrieval_n"].max())
        every = asked.loc[asked["retrieval"] >= 1.0, "configuration"].tolist()
        none = asked.loc[asked["retrieval"] <= 0.0, "configuration"].tolist()
        lines.append(
            f"**Passkey.** Of {n} questions each (a key hidden at five depths of a block-long prompt), "
            f"{len(every)} of {len(asked)} configurations answer all"
            + (f" ({_md(', '.join(every))})" if every else "")
            + f"; {len(none)} answer none"
            + (f" ({_md(', '.join(none))})." if none else ".")
        )
    return lines


@guarded
def render() -> None:
    st.title("Frontier")
    keys = frontier_keys()
    if not keys:
        st.info(
            "No frontier run under the logs root. `aah-viz frontier MODEL_DIR --data TEXT --out RUN` evaluates a "
            "pretrained model's configurations (unpatched, static windows, profiled per-head windows, AAH before "
            "and after adaptation; with --sink-tokens 1,4 each also keeping the first tokens visible) on the same "
            "held-out blocks (docs/real-model.md)."
        )
        return
    labels = {k: session.label(k) for k in keys}  # computed now: format_func may be called outside the run
    key = address.choose(
        st.selectbox,
        "frontier",
        "frontier_run",
        keys,
        label="Frontier run",
        format_func=labels.__getitem__,
    )
    root, tok = session.logs_root(), session.token(key)
    t = table(root, key, tok)
    manifest = cache.manifest(root, key, tok)
    model = (manifest.get("config") or {}).get("model_dir", "")
    if t.empty:
        st.warning("This frontier run holds no evaluated configuration yet (resume it with the same command).")
        return
    blocks = int(t["n_blocks"].max())
    st.caption(
        plain(
            f"Model {model}; T = {manifest.get('seq_len')}; {blocks} held-out blocks, the same for every "
            f"configuration; {len(t)} configurations."
        )  # fmt: skip
    )
    missing = not_evaluated(manifest, t)
    if missing:
        st.warning(
            plain(
                f"{len(t)} of {len(t) + len(missing)} planned configurations evaluated (the run is "
                f"{manifest.get('status') or 'unfinished'}); not yet: {', '.join(missing)}. The same "
                "aah-viz frontier command continues it."
            )
        )
    found = details(root, key, tok)
    maps = adapted_runs(key, found)
    first_token, profiled = None, None
    for k in maps:
        first_token = profile(root, k, session.token(k))
        if first_token is not None:
            profiled = k
            break
    shares = {c: v for c, v in window_shares(found).items() if c.endswith("_adapted")} or window_shares(found)
    st.markdown(findings_markdown(t, against_nearest_static(found), shares, first_token, profiled, maps))
    chart(frontier_figure(t), key="frontier_fig", name="frontier", data=t)
    st.caption(
        "Each point: perplexity over the held-out tokens with its 95% interval from a bootstrap over blocks "
        "(the same resamples for every configuration, so differences are paired), at its ACR (mean key length "
        "over T). The dotted line joins the Pareto front: configurations no other beats on both ACR and "
        "perplexity. "
        + speed_caption(found)
        + " Hollow dotted marks keep the first k positions visible to every query (sink tokens, "
        "+kS); their ACR counts those pairs."
        + (
            " Passkey retrieved: the share of the passkey questions (a key hidden at five depths of filler, "
            "prompts a block long) the configuration answers."
            if t["retrieval"].notna().any()
            else ""
        )
    )
    # the chart's point labels beside the table's names, so the two read as one
    labelled = t.assign(on_chart=[label or "–" for label in point_labels(t)])
    if labelled["retrieval"].isna().all():  # no passkey questions asked in this frontier
        labelled = labelled.drop(columns="retrieval")
    shown = labelled[[c for c in SHOWN if c in labelled]].rename(columns=SHOWN).sort_values("ACR")
    show_table(
        shown,
        hide_index=True,
        width="stretch",
        key="frontier_table",
        column_config={name: st.column_config.NumberColumn(format=fmt) for name, fmt in FORMATS.items()},
    )
    data_downloads(t, f"frontier-{key}", "frontier_data")  # every column and bound, as aah-viz export writes
    _adaptation(key, found, t)


if __name__ == "__main__":
    render()
