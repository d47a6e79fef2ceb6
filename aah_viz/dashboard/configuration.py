"""One configuration at a time: pages that average runs (Compare, grouped Training curves) never pool
runs of different models, sequence lengths, candidate windows or training lengths, nor (:func:`setups`)
runs of one regime set up differently. With several configurations among the selected runs, a picker
(in the address) chooses one, by default that of the run open (else the largest), and the page names
the runs it leaves out."""

from __future__ import annotations

import streamlit as st

from aah_viz.analysis.configurations import setup_names, split_by_configuration
from aah_viz.dashboard import address, cache, selection, session
from aah_viz.dashboard.common import say_left_out


def _manifests(keys) -> dict[str, dict]:
    root = session.logs_root()
    views = session.overviews()  # the manifests came with the overviews: no cache call per run
    manifests = {
        k: dict(views[k]["manifest"]) if "manifest" in views.get(k, {}) else cache.manifest(root, k, session.token(k))
        for k in keys
    }
    return manifests


def groups(keys) -> list[tuple[str, list[str]]]:
    """``[(label, keys)]`` of the runs, the largest configuration first."""
    return split_by_configuration(_manifests(keys))


def setups(keys) -> dict[str, str]:
    """run -> the name of its setup (its regime and the settings telling it from the other runs of that
    regime): what Compare's rows and Training's groups are, never pooling runs set up differently."""
    return setup_names(_manifests(keys))


def same_configuration(key: str, keys) -> list[str]:
    """The runs among ``keys`` of ``key``'s configuration (``key`` first)."""
    for _, members in groups([key, *[k for k in keys if k != key]]):
        if key in members:
            return [key, *[k for k in members if k != key]]
    return [key]


def one_configuration(keys, widget_key: str, param: str = "config", where=None) -> list[str]:
    """The runs of one configuration among ``keys`` (all of them when they share one)."""
    keys = list(keys)
    found = groups(keys)
    if len(found) <= 1:
        return keys
    labels = [label for label, _ in found]
    members = dict(found)
    # the configuration of the run the user has open, when it is among these; else the largest
    current = selection.current().get("run")
    default = next((lab for lab, ks in found if current in ks), labels[0])
    label = address.choose(
        (where or st).selectbox,
        param,
        widget_key,
        labels,
        default,
        label="Configuration (model, sequence length T, candidate windows, training steps)",
        format_func=lambda lab: f"{lab} ({len(members[lab])} run{'' if len(members[lab]) == 1 else 's'})",
        help="Runs of different models, sequence lengths, candidate windows or training lengths are never "
        "averaged together: pick the configuration to show.",
    )
    chosen = members[label]
    left = [k for k in keys if k not in chosen]
    say_left_out(
        left,
        "another configuration: pick it above",
        lead=f"{len(found)} configurations among the selected runs; showing {label}. ",
    )
    return [k for k in keys if k in chosen]
