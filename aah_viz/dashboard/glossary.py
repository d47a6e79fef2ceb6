"""Glossary: what every metric on the dashboard means, one entry per term, linked from each metric."""

from __future__ import annotations

import streamlit as st

# term -> (display name, definition). Keys are the anchors of the Glossary page (``glossary#acr``).
TERMS: dict[str, tuple[str, str]] = {
    "training_loss": (
        "training loss (last batch)",
        "Cross-entropy in nats of the last logged training batch, with dropout on: one noisy batch, "
        "so it can sit well above the validation loss. Compare runs on validation loss.",
    ),
    "val_loss": (
        "validation loss",
        "Mean cross-entropy in nats over the held-out evaluation batches at an eval step (no dropout). "
        "Perplexity is exp(validation loss).",
    ),
    "perplexity": ("perplexity", "exp(loss): the effective number of equally likely next tokens."),
    "lr": ("learning rate", "The optimiser's learning rate at a step (warm-up then cosine decay by default)."),
    "tokens_per_s": ("tokens/s", "Training tokens processed per second of wall time, measured on the training host."),
    "step_time": ("step time", "Wall-clock seconds of one training step (forward, backward, optimiser)."),
    "smoothing": (
        "smoothing",
        "Exponential moving average over logged points (TensorBoard's debiased EMA): 0 shows raw values, "
        "0.99 follows only slow trends. The raw series stays in the CSV download.",
    ),
    "acr": (
        "ACR (attention coverage ratio)",
        "Σ over heads and query positions of the attended window, divided by H·T²: the share of the full T×T "
        "score matrix a head's window covers. The paper's key-length proxy; 1 means every head sees the "
        "whole context (causal masking not counted).",
    ),
    "causal_coverage": (
        "causal-pair coverage",
        "Attended causal (query, key) pairs divided by all causal pairs T(T+1)/2: the share of the "
        "causal attention a window keeps. 1 for full causal attention.",
    ),
    "realised_work": (
        "realised work",
        "Score elements the attention backend actually computed, divided by all causal pairs. The "
        "dense-masked backend computes the whole T×T matrix and masks it, so it reads about 2 "
        "(T² / (T(T+1)/2)) whatever the windows are; banded and flex backends compute only the window "
        "and read close to causal-pair coverage.",
    ),
    "flops_ratio": (
        "FLOPs ratio (analytic estimate)",
        "Attention FLOPs relative to full attention estimated from ACR (method §11.1); not a measurement.",
    ),
    "window": (
        "window",
        "How many past tokens a head attends to (its key span), in tokens; chosen per group by the "
        "controller from the candidate windows.",
    ),
    "branch_frequency": (
        "branch frequency",
        "Share of a layer's heads whose executed window is a given candidate at a step (heads at window / H): "
        "the data of the paper's Figure 4.",
    ),
    "margin": (
        "decision margin",
        "Top-1 minus top-2 controller logit of a group: how decided the window choice is. Near 0 the choice "
        "flips on small feature changes.",
    ),
    "ari": (
        "ARI vs previous update",
        "Adjusted Rand index of a layer's level-0 partition of heads against the previous routing update: "
        "1 = same grouping (labels may be permuted), 0 = as similar as chance, below 0 = less.",
    ),
    "switch_rate": (
        "switch rate",
        "Window changes of a head per routing update (changes / (updates − 1)); dwell time is the mean "
        "number of steps a head keeps a window.",
    ),
    "topology_change": (
        "topology change",
        "A routing update whose tree differs in shape from the previous one: any level's partition or the "
        "number of levels changed.",
    ),
    "controller_grad_norm": (
        "controller gradient norm",
        "L2 norm of the window controller's gradient at a step. In the reference no gradient reaches the "
        "controller (it is zero), so its choices are a fixed random function of drifting statistics.",
    ),
    "weight_drift": ("controller weight drift", "L2 distance of the controller's weights from their initial values."),
    "routing_update": (
        "routing update",
        "A step where the hierarchy is rebuilt and windows are chosen again (every control interval after "
        "warm-up); windows only change at updates, so step sliders move between updates.",
    ),
    "warmup": (
        "warm-up",
        "The first steps, where routing is computed (a shadow build) but every head runs the full window.",
    ),
    "forced_split": (
        "forced split",
        "Every head joined one group at the level-0 similarity threshold, so the method split the heads in two "
        "around the least similar pair (method §5.5). The groups then exist whether or not the heads differ.",
    ),
    "cluster_validity": (
        "cluster validity (real groups)",
        "The silhouette of a level-0 partition on the cosine distance of the heads' routing features, against "
        "two nulls: random partitions with the same group sizes, and the same number of groups fitted by "
        "complete linkage to structureless heads (one Gaussian with the heads' mean and covariance). The "
        "partition is real only when its silhouette beats both 95th percentiles: a partition fitted to the "
        "features always beats random relabelings, even on noise.",
    ),
    "shadow": ("shadow build", "Routing computed but not executed (warm-up, or a regime with control off)."),
    "joint_scoring": (
        "jointly scored",
        "A group whose window logits were scored together with a sibling group (pairwise joint scorer); drawn "
        "with a red outline.",
    ),
    "parent_clamp": (
        "parent clamp",
        "A child group may not use a longer window than its parent: its chosen window is cut to the parent's. "
        "Fixed-window regimes override the choice as well; both show as 'chosen ≠ executed'.",
    ),
    "group_names": (
        "group names",
        "Groups are named by level and index in words ('level 1, group 2'); heads as L3H5 = layer 3, head 5.",
    ),
    "status": (
        "status",
        "running: the writer is open (or died without closing; a stale heartbeat says so); finished; failed (an "
        "error ended it); stopped (a signal ended training after a step; resume continues it).",
    ),
    "factorial_effect": (
        "effect (factorial sweep)",
        "From a linear model of a sweep's design fitted over seeds (aah-viz effects). A main effect is the mean "
        "of the final metric over the design's cells at a level minus its mean over the cells at the factor's "
        "first (reference) level; a two-way interaction is a difference of differences, (L, M) − (L, ref) − "
        "(ref, M) + (ref, ref). Its 95% interval is a t interval on the model's residual degrees of freedom "
        "(the seed-to-seed spread); an interval that holds 0 tells no effect apart from that spread.",
    ),
    "slots": (
        "% of slots",
        "A slot is one (layer, head) pair: with 4 layers of 12 heads a model has 48. The share of slots at a "
        "window is how many of them execute that window, in percent of all.",
    ),
    "offset_baseline": (
        "offset baseline",
        "The best fixed-offset guess for a syntactic relation: always the word at one relative offset (-3, -2, "
        "-1, +1 or +2), the offset chosen per relation as the one that scores best. A head's score minus it "
        "(score_minus_baseline) is what the head knows beyond position: 0 is no better than a fixed offset.",
    ),
    "needed_window": (
        "needed window",
        "The smallest window (tokens, any size) that keeps 95% of a head's attention mass under full attention "
        "(`aah-viz profile`; the Probes page's chart uses 90%). A head whose executed window is smaller than its "
        "needed window is cut: it loses part of what it would attend to.",
    ),
    "nmi": (
        "NMI and V-measure",
        "Normalised mutual information between two partitions of the same heads (AAH's groups and the probe "
        "clusters), from 0 (independent) to 1 (identical up to names); the V-measure is the harmonic mean of "
        "homogeneity and completeness, equal to NMI with the arithmetic mean. Both reward many small groups: "
        "every head alone scores high, which is why the ARI against a permutation null is the headline.",
    ),
    "pareto_front": (
        "Pareto front",
        "The configurations no other configuration beats on both axes at once (lower perplexity and lower ACR): "
        "the Frontier page draws a line through them. A configuration off the front is bettered by one on it "
        "in quality at no more compute, or in compute at no worse quality.",
    ),
    "sink_tokens": (
        "sink tokens",
        "The first tokens of a sequence, on which many heads put a large share of their attention whatever "
        "they read (an attention sink). A window that cuts them off changes what the head computes, so a "
        "configuration with N sink tokens lets every head see the first N tokens besides its window.",
    ),
    "single_seed": (
        "single seed",
        "A regime with one run has no spread over seeds: its values are shown without ± and are never "
        "marked significant.",
    ),
}


def help_text(term: str) -> str:
    """Tooltip text for a metric: the definition and a link to its glossary entry."""
    name, definition = TERMS[term]
    return f"**{name}**: {definition} [Glossary](/glossary#{term.replace('_', '-')})"


def render() -> None:
    st.title("Glossary")
    st.caption("Every metric the dashboard shows; each metric's ? tooltip links here.")
    for term, (name, definition) in TERMS.items():
        st.subheader(name, anchor=term.replace("_", "-"))
        st.markdown(definition)


if __name__ == "__main__":
    render()
