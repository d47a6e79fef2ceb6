"""The hierarchy of one layer at one routing update as a networkx tree, with a deterministic layout.

Nodes are ``("group", level, node)`` for the groups of each level and ``("head", h)`` for the heads
(the leaves). Edges point from parent to child. Node order, child order and coordinates depend
only on the logged indices (sorted explicitly), never on set or dict iteration of hashed values,
so the same rows always give the same picture.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd


def group_id(level: int, node: int) -> tuple[str, int, int]:
    return ("group", int(level), int(node))


def head_id(head: int) -> tuple[str, int]:
    return ("head", int(head))


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, float) and math.isnan(value):
        return []
    return [v.item() if hasattr(v, "item") else v for v in list(value)]


def _scalar(value: Any):
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def tree_graph(
    tree: pd.DataFrame, n_head: int, windows: list[int], head_windows: dict[int, int] | None = None
) -> nx.DiGraph:
    """Build the tree of one (layer, step) from its ``tree`` rows.

    ``windows`` are the candidate windows (to turn ``final_idx`` into tokens); ``head_windows``
    (head -> executed window) labels the leaves, else each head takes its level-0 group's window.
    """
    g = nx.DiGraph()
    rows = tree.sort_values(["level", "node"], kind="stable") if not tree.empty else tree
    for h in range(n_head):
        g.add_node(head_id(h), kind="head", level=-1, head=h, members=[h], window=None)
    for rec in rows.to_dict("records"):
        level, node = int(rec["level"]), int(rec["node"])
        final_idx = _scalar(rec.get("final_idx"))
        window = windows[int(final_idx)] if final_idx is not None and 0 <= int(final_idx) < len(windows) else None
        g.add_node(
            group_id(level, node),
            kind="group",
            level=level,
            node=node,
            members=sorted(int(m) for m in _as_list(rec.get("members"))),
            children=[int(c) for c in _as_list(rec.get("children"))],
            parent=_scalar(rec.get("parent")),
            logits=[float(x) for x in _as_list(rec.get("logits"))],
            base_logits=[float(x) for x in _as_list(rec.get("base_logits"))],
            margin=_scalar(rec.get("margin")),
            raw_idx=_scalar(rec.get("raw_idx")),
            final_idx=final_idx,
            window=window,
            joint_paired=bool(_scalar(rec.get("joint_paired")) or False),
            joint_delta=_scalar(rec.get("joint_delta")),
            shadow=bool(_scalar(rec.get("shadow")) or False),
            origin=_scalar(rec.get("origin")),
        )
    for n, data in list(g.nodes(data=True)):
        if data["kind"] != "group":
            continue
        level = data["level"]
        if level == 0:
            for h in data["members"]:
                if 0 <= h < n_head:
                    g.add_edge(n, head_id(h))
        else:
            for c in data["children"]:
                child = group_id(level - 1, c)
                if child in g:
                    g.add_edge(n, child)
        parent = data["parent"]
        if parent is not None and group_id(level + 1, int(parent)) in g:
            g.add_edge(group_id(level + 1, int(parent)), n)
    for h in range(n_head):
        hid = head_id(h)
        if head_windows is not None and h in head_windows:
            g.nodes[hid]["window"] = int(head_windows[h])
        else:
            parents = sorted(g.predecessors(hid))
            if parents:
                g.nodes[hid]["window"] = g.nodes[parents[0]]["window"]
    return g


def _child_order(g: nx.DiGraph, n) -> list:
    def key(c):
        d = g.nodes[c]
        return (min(d["members"]) if d["members"] else 1 << 30, d.get("node", d.get("head", 0)))

    return sorted(g.successors(n), key=key)


def roots(g: nx.DiGraph) -> list:
    """Nodes without a parent, top level first, then by smallest member head."""
    rs = [n for n in g.nodes if g.in_degree(n) == 0]

    def key(n):
        d = g.nodes[n]
        return (-d["level"], min(d["members"]) if d["members"] else 1 << 30, n[-1])

    return sorted(rs, key=key)


def tree_layout(g: nx.DiGraph) -> dict:
    """node -> (x, y): leaves at y = 0 in depth-first order, a group at y = level + 1, centred over its children."""
    pos: dict = {}
    next_x = [0.0]

    def place(n) -> float:
        children = _child_order(g, n)
        if not children:
            x = next_x[0]
            next_x[0] += 1.0
        else:
            xs = [pos[c][0] if c in pos else place(c) for c in children]
            x = float(np.mean(xs))
        level = g.nodes[n]["level"]
        pos[n] = (x, float(level + 1))
        return x

    for r in roots(g):
        if r not in pos:
            place(r)
    return pos


def tree_summary(g: nx.DiGraph) -> dict:
    """Levels present, groups per level, and how many groups were scored jointly with a sibling."""
    groups = [d for _, d in g.nodes(data=True) if d["kind"] == "group"]
    levels = sorted({d["level"] for d in groups})
    return {
        "levels": len(levels),
        "groups_per_level": [sum(1 for d in groups if d["level"] == lv) for lv in levels],
        "joint_paired": sum(1 for d in groups if d.get("joint_paired")),
        "shadow": any(d.get("shadow") for d in groups),
    }


def _partition(g: nx.DiGraph, level: int) -> list[tuple[int, ...]]:
    return sorted(tuple(d["members"]) for _, d in g.nodes(data=True) if d["kind"] == "group" and d["level"] == level)


def collapse_repeated_levels(g: nx.DiGraph) -> tuple[nx.DiGraph, list[int]]:
    """Drop every level whose groups are exactly the groups of the level below (one child each, same
    members): such a level adds nothing to the picture. Returns the smaller tree and the dropped levels.

    A kept group remembers the levels it stands for (``also_levels``) and their windows, so the hover
    can still say what each repeated level chose.
    """
    out = g.copy()
    levels = sorted({d["level"] for _, d in out.nodes(data=True) if d["kind"] == "group"})
    dropped: list[int] = []
    for level in levels[1:]:
        nodes = [n for n, d in out.nodes(data=True) if d["kind"] == "group" and d["level"] == level]
        if not nodes:
            continue
        below = level - 1
        while below in dropped:
            below -= 1
        if _partition(out, level) != _partition(out, below):
            continue
        if any(len(list(out.successors(n))) != 1 for n in nodes):
            continue
        for n in nodes:
            (child,) = list(out.successors(n))
            cd = out.nodes[child]
            nd = out.nodes[n]
            cd.setdefault("also_levels", []).append((level, nd.get("node"), nd.get("window")))
            if nd.get("joint_paired"):  # the drawn group stands for a jointly scored level too
                cd["joint_paired"] = True
                cd["joint_levels"] = [*cd.get("joint_levels", []), level]
                cd["joint_delta"] = max(float(cd.get("joint_delta") or 0), float(nd.get("joint_delta") or 0))
            for p in list(out.predecessors(n)):
                out.add_edge(p, child)
            out.remove_node(n)
        dropped.append(level)
    return out, dropped


def moved_heads(
    prev: dict[int, tuple[frozenset, int | None]], cur: dict[int, tuple[frozenset, int | None]]
) -> set[int]:
    """Heads whose level-0 group-mates or executed window differ between two routing updates.

    Each argument maps head -> (its level-0 group's members, its window).
    """
    return {h for h, v in cur.items() if h in prev and prev[h] != v}


def head_states(tree: pd.DataFrame, head_windows: dict[int, int]) -> dict[int, tuple[frozenset, int | None]]:
    """head -> (members of its level-0 group, executed window) at one update."""
    out: dict[int, tuple[frozenset, int | None]] = {}
    if tree is None or tree.empty:
        return {h: (frozenset(), w) for h, w in head_windows.items()}
    level0 = tree[tree["level"] == 0]
    for members in level0["members"]:
        ms = frozenset(int(m) for m in _as_list(members))
        for h in ms:
            out[h] = (ms, head_windows.get(h))
    for h, w in head_windows.items():
        out.setdefault(h, (frozenset(), w))
    return out
