"""Replay a reference training trajectory (``../shared/reference/conformance/trajectories*``).

The reference's initial weights, batches, optimiser, schedule, per-step calls and evaluation
are reproduced exactly (see that folder's README); every forward's loss and, per layer, the
path, executed windows, hierarchy, head statistics and level features are recorded.

The recordings carry the float rounding of the machine that made them, and that rounding is not
named by the instruction set alone: MKL and oneDNN pick kernels by CPU vendor, model and features,
and by their versions. So every recording is keyed by the fingerprint of its machine
(``machine_fingerprint``; ``reference_recordings.json``, or a ``fingerprint.json`` stored with the
recording), and ``replay_plan`` compares with ``==`` (exact mode) only against a recording whose
fingerprint equals this process's in every field. Everywhere else it compares with the nearest
recording within stated tolerances, allowing a different hierarchy or window only where our own
decision was a near tie (tolerance mode, ``compare_within_tolerance``). Used by
``tests/test_reference_trajectories.py``; needs torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import machine_fingerprint as fp
import numpy as np
import torch

from instrumentation.config import AAHConfig
from instrumentation.model import AAHTransformer
from instrumentation.routing import hierarchy as hierarchy_module
from instrumentation.routing.conformance import TIE_MARGIN

CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "conformance"
KNOWN_MACHINES = Path(__file__).resolve().parent / "reference_recordings.json"
TRAJECTORY_SETS = "trajectories*"  # every folder of recorded runs under CONFORMANCE

# Tolerance mode. Measured across the recordings (200 steps, all 10 runs): losses within 2.7e-7
# relative, head statistics and level features within 1.9e-6, every executed window and path
# equal, and hierarchies equal but for the order of the two groups of a forced split whose anchor
# led by under 1e-6. The tolerances leave a factor of about 50 over that.
FLOAT_RTOL = 1e-5
FLOAT_ATOL = 1e-5
MARGIN_TOL = TIE_MARGIN  # a decision this close (similarity or logit units) to flipping is a near tie
MAX_NEAR_TIE_SHARE = 0.25  # of the layer-forwards that carry a hierarchy
MIN_STEPS_BEFORE_FORK = 20  # past warm-up (10 steps) and two control updates

REPORTS: list[str] = []  # tolerance-mode summaries, printed at the end of the test session (conftest)


@dataclass(frozen=True)
class Recording:
    """A recording (a trajectory folder or a case file) and the fingerprint of the machine that made it."""

    path: Path
    fingerprint: dict | None

    @property
    def name(self) -> str:
        return self.path.name


def recording_fingerprint(path: Path, known: Path = KNOWN_MACHINES) -> dict | None:
    """The fingerprint stored with a recording (``fingerprint.json`` in its folder, or
    ``NAME.fingerprint.json`` beside a file), else the one ``reference_recordings.json`` gives."""
    stored = path / "fingerprint.json" if path.is_dir() else path.with_name(path.name + ".fingerprint.json")
    if stored.is_file():
        return json.loads(stored.read_text())
    entry = json.loads(known.read_text())["recordings"].get(path.name) if known.is_file() else None
    return None if entry is None else entry.get("fingerprint")


def trajectory_recordings(root: Path = CONFORMANCE) -> list[Recording]:
    return [Recording(p, recording_fingerprint(p)) for p in sorted(root.glob(TRAJECTORY_SETS)) if p.is_dir()]


@dataclass(frozen=True)
class ReplayPlan:
    """Which recording a replay compares with, and how."""

    mode: str  # "exact" or "tolerance"
    recording: Recording
    ours: dict  # this process's fingerprint

    @property
    def folder(self) -> Path:
        return self.recording.path

    def why(self) -> str:
        if self.mode == "exact":
            return "recorded on this machine: every fingerprint field equal"
        return "not recorded on this machine: " + fp.describe_differences(self.ours, self.recording.fingerprint)

    def describe(self) -> str:
        how = (
            "bit for bit (==)"
            if self.mode == "exact"
            else (
                f"within rtol {FLOAT_RTOL:g} / atol {FLOAT_ATOL:g}, decisions equal unless a near tie "
                f"(margin <= {MARGIN_TOL:g}, at most {MAX_NEAR_TIE_SHARE:.0%} of hierarchy forwards)"
            )
        )
        return f"reference replay: {self.mode} mode against {self.folder.name}/, {how} ({self.why()})"


def replay_plan(ours: dict | None = None, root: Path = CONFORMANCE) -> ReplayPlan | None:
    """Exact against the recording of this machine, else tolerance against the nearest; None without any."""
    ours = fp.this_machine() if ours is None else ours
    sets = trajectory_recordings(root)
    if not sets:
        return None
    own = [r for r in sets if fp.matches(ours, r.fingerprint)]
    if own:
        return ReplayPlan("exact", own[0], ours)
    nearest = max(sets, key=lambda r: fp.similarity(ours, r.fingerprint))
    return ReplayPlan("tolerance", nearest, ours)


def foreign_plans(plan: ReplayPlan | None, root: Path = CONFORMANCE) -> list[ReplayPlan]:
    """Tolerance plans against every other recording: each was made on another machine than the one
    ``plan`` compares with, so each must replay here within tolerance."""
    if plan is None:
        return []
    return [ReplayPlan("tolerance", r, plan.ours) for r in trajectory_recordings(root) if r.path != plan.folder]


# reference parameter-name pieces -> ours (trajectories/README.md)
RENAMES = (
    ("blocks.", "h."),
    (".ln1.", ".ln_1."),
    (".ln2.", ".ln_2."),
    (".attn.qkv.", ".attn.c_attn."),
    (".attn.proj.", ".attn.c_proj."),
    (".attn.controller.mlp.", ".attn.controller.net."),
    (".attn.joint_sibling_scorer.mlp.", ".attn.joint_scorer.net."),
    (".attn.pairwise_bias.mlp.", ".attn.sibling_bias.net."),
    (".mlp.fc1.", ".mlp.c_fc."),
    (".mlp.fc2.", ".mlp.c_proj."),
)

SHADOW_PATHS = ("warmup_or_disabled_control", "grouping_only_full_attention")
FIELDS = ("loss", "path", "windows", "levels", "head_stats", "level_features")


def trajectory_names(folder: Path) -> list[str]:
    return sorted(p.name[: -len(".json")] for p in folder.glob("*.json"))


def _our_name(ref: str) -> str:
    for a, b in RENAMES:
        ref = ref.replace(a, b)
    return ref


def build_model(doc: dict, weights: Path, **overrides) -> AAHTransformer:
    cfg = AAHConfig.from_reference_dict(
        doc["reference_model_config"],
        vocab_size=doc["vocab_size"],
        block_size=doc["seq_len"],
        persist_routing_state=False,
        eval_mutates_routing=True,
        **overrides,
    )
    model = AAHTransformer(cfg)
    own = model.state_dict()
    loaded = {}
    with np.load(weights) as z:
        for name in z.files:
            ours = _our_name(name)
            assert ours in own, f"reference parameter {name} -> {ours} has no counterpart"
            loaded[ours] = torch.from_numpy(z[name].copy())
    missing = [k for k in own if k not in loaded and k != "lm_head.weight" and not k.endswith("_extra_state")]
    assert not missing, f"no reference weights for {missing}"
    model.load_state_dict(loaded, strict=False)
    return model


def _lr_lambda(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@dataclass
class Replay:
    """What our model did at every forward, in the reference's format (one dict per layer)."""

    losses: list[float] = field(default_factory=list)
    layers: list[list[dict]] = field(default_factory=list)
    followed: list[str] = field(default_factory=list)  # near-tie groupings taken the recording's way


def _window_margin(tree) -> float:
    """The smallest lead of a group's chosen logit over its runner-up, over every level of ``tree``."""
    margin = math.inf
    for lvl in tree:
        top2 = lvl.logits.float().topk(2, dim=-1).values if lvl.logits.shape[-1] > 1 else None
        if top2 is not None and top2.numel():
            margin = min(margin, float((top2[:, 0] - top2[:, 1]).min()))
    return margin


def _levels_margin(tree, carried: float) -> float:
    """The clustering's smallest decision margin over the levels of ``tree``. A level 0 that was not
    clustered on this forward (frozen labels) carries the margin of the build that made it."""
    margins = [lvl.facts.decision_margin for lvl in tree[1:] if lvl.facts.decision_margin is not None]
    level0 = tree[0].facts.decision_margin
    return min(margins + [carried if level0 is None else level0])


@contextmanager
def _following_near_ties(model: AAHTransformer, doc: dict, out: Replay):
    """While active, a level-0 clustering whose decision margin is within MARGIN_TOL and whose groups
    differ from the recording's at the same forward and layer takes the recording's groups (noted in
    ``out.followed``). Another CPU's rounding can tip such a tie either way; following the recording
    keeps the two runs on one path, so that everything after it stays comparable. Decisive
    groupings are never touched."""
    layer = {"index": 0}
    hooks = [
        mod.register_forward_pre_hook(lambda _m, _a, i=i: layer.__setitem__("index", i))
        for i, mod in enumerate(model.aah_layers())
    ]
    original = hierarchy_module.cluster

    def cluster(X, **kw):
        res = original(X, **kw)
        fwd_index = len(out.losses)  # the forward now running: recorded once it returns
        if not kw.get("allow_forced_bipartition") or res.decision_margin > MARGIN_TOL:
            return res
        fwd = doc["forwards"][fwd_index]
        ref = (fwd["layers"] or [{}])[layer["index"]].get("levels")
        if ref is None or ref[0] == res.groups or sorted(sum(ref[0], [])) != list(range(X.shape[0])):
            return res
        out.followed.append(f"{_where(fwd)} L{layer['index']}")
        return dataclasses.replace(res, groups=[list(g) for g in ref[0]])

    hierarchy_module.cluster = cluster
    try:
        yield
    finally:
        hierarchy_module.cluster = original
        for h in hooks:
            h.remove()


def replay(
    name: str,
    folder: Path,
    max_steps: int | None = None,
    follow_near_ties: bool = False,
    **overrides,
) -> tuple[dict, Replay]:
    """Run trajectory ``name`` of ``folder`` (up to ``max_steps`` training steps); returns (its doc, our replay).

    ``follow_near_ties`` (tolerance mode only): near-tie level-0 groupings take the recording's way."""
    doc = json.loads((folder / f"{name}.json").read_text())
    torch.manual_seed(777 + int(doc.get("seed", 0)))
    model = build_model(doc, folder / f"{name}.weights.npz", **overrides)
    tr = doc["training"]
    total = int(tr["max_steps"])
    steps = total if max_steps is None else min(total, max_steps)
    opt = torch.optim.AdamW(
        model.parameters(), lr=tr["lr"], weight_decay=tr["weight_decay"], betas=tuple(tr["betas"]), eps=tr["eps"]
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_lambda(s, 10, total))
    control = model.cfg.apply_window_control
    out = Replay()
    last_tree: dict[int, list] = {}
    level0_margin: dict[int, float] = {}  # per layer, of the last clustered level 0
    current: dict[int, dict] = {}

    def on_event(event) -> None:
        tree = event.tree
        if tree is None and event.path_mode in SHADOW_PATHS and model.cfg.build_hierarchy:
            # a rebuild skipped within a control interval would repeat the previous one exactly
            tree = last_tree.get(event.layer)
        if tree is not None and event.path_mode not in ("ungrouped_control_update",):
            last_tree[event.layer] = tree
            if tree[0].facts.decision_margin is not None:
                level0_margin[event.layer] = tree[0].facts.decision_margin
        current[event.layer] = {
            "path": event.path_mode,
            "windows": event.window_idx.tolist(),
            "levels": None if tree is None else [[list(g) for g in lvl.groups] for lvl in tree],
            "level_features": None if tree is None else [lvl.features.tolist() for lvl in tree],
            # how near a tie the decisions behind this forward's groups and windows were
            "levels_margin": math.inf
            if tree is None
            else _levels_margin(tree, level0_margin.get(event.layer, math.inf)),
            "windows_margin": math.inf if tree is None else _window_margin(tree),
        }
        if event.path_mode == "ungrouped_control_update":
            current[event.layer]["levels"] = current[event.layer]["level_features"] = None

    def record(loss: torch.Tensor) -> None:
        out.losses.append(float(loss.detach()))
        rows = []
        for i, layer in enumerate(model.aah_layers()):
            row = dict(current[i])
            stats = layer.state.prev_stats
            row["head_stats"] = None if stats is None else stats.T.tolist()
            rows.append(row)
        out.layers.append(rows)

    eval_batches = [torch.tensor(b, dtype=torch.long) for b in doc["batches_token_ids"]["eval"]]
    following = _following_near_ties(model, doc, out) if follow_near_ties else nullcontext()
    with model.subscribe(on_event), following:
        for step in range(steps):
            batch = torch.tensor(doc["batches_token_ids"]["train"][step], dtype=torch.long)
            model.train()
            model.set_control(control)
            model.set_step(step)
            loss = model(batch[:, :-1], targets=batch[:, 1:]).loss
            record(loss)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            if (step + 1) % int(tr["eval_every"]) == 0:
                model.eval()
                with torch.no_grad():
                    for b in eval_batches:
                        record(model(b[:, :-1], targets=b[:, 1:]).loss)
    return doc, out


def _where(fwd: dict) -> str:
    return f"{fwd['kind']} {fwd['step']}" + ("" if fwd["eval_batch"] is None else f"/{fwd['eval_batch']}")


def compare(doc: dict, ours: Replay) -> dict[str, list[str]]:
    """Per field, the forwards (``kind step[/batch] layer``) where ours differs from the reference (``==``)."""
    diffs: dict[str, list[str]] = {f: [] for f in FIELDS}
    for fwd, loss, layers in zip(doc["forwards"], ours.losses, ours.layers):
        where = _where(fwd)
        if loss != fwd["loss"]:
            diffs["loss"].append(where)
        for i, (ref, got) in enumerate(zip(fwd["layers"] or [], layers)):
            pairs = {
                "path": (ref["path"], got["path"]),
                "windows": (ref["executed_window_idx"], got["windows"]),
                "levels": (ref["levels"], got["levels"]),
                "head_stats": (ref["head_stats_entropy_norm_usage"], got["head_stats"]),
                "level_features": (ref.get("level_features"), got["level_features"]),
            }
            for key, (a, b) in pairs.items():
                if a != b:
                    diffs[key].append(f"{where} L{i}")
    return diffs


@dataclass
class ToleranceReport:
    """What ``compare_within_tolerance`` found."""

    diffs: dict[str, list[str]]  # per field, where ours is beyond tolerance or decided otherwise without a near tie
    near_ties: list[str]  # decisions that differ where our margin was within MARGIN_TOL
    hierarchy_forwards: int  # compared layer-forwards whose recording carries a hierarchy
    worst: dict[str, float]  # per float field, the largest |ours - recorded| / (FLOAT_ATOL + FLOAT_RTOL |recorded|)
    compared_steps: int  # training steps compared (all, or those before the fork)
    forked_at: str | None = None  # the forward where a near tie changed executed windows

    @property
    def passed(self) -> bool:
        bound = MAX_NEAR_TIE_SHARE * self.hierarchy_forwards
        early = self.forked_at is not None and self.compared_steps < MIN_STEPS_BEFORE_FORK
        return not any(self.diffs.values()) and len(self.near_ties) <= bound and not early

    def summary(self) -> str:
        worst = ", ".join(f"{k} {v:.3f}" for k, v in self.worst.items())
        fork = (
            ""
            if self.forked_at is None
            else (
                f"; forked at {self.forked_at}, where a near tie changed the executed windows "
                f"(steps before it compared, at least {MIN_STEPS_BEFORE_FORK} required)"
            )
        )
        return (
            f"{self.compared_steps} steps compared, {len(self.near_ties)} near-tie decisions of "
            f"{self.hierarchy_forwards} hierarchy forwards (bound {MAX_NEAR_TIE_SHARE:.0%}); worst deviation as a "
            f"share of the tolerance: {worst}{fork}"
        )


def _excess(got, ref, ragged: bool = False) -> float:
    """max |got - ref| / (atol + rtol |ref|); inf when the shapes differ. ``ragged``: lists of arrays
    of different shapes (level features, one matrix per level), compared item by item."""
    if ragged:
        if len(got) != len(ref):
            return math.inf
        return max((_excess(g, r) for g, r in zip(got, ref)), default=0.0)
    a, b = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / (FLOAT_ATOL + FLOAT_RTOL * np.abs(b))))


def _leaf_sets(levels: list) -> list[list[frozenset]]:
    """Each level's groups as sets of heads (the partition, whatever the order of groups and members)."""
    out, below = [], None
    for groups in levels:
        sets = [frozenset(g) if below is None else frozenset().union(*(below[i] for i in g)) for g in groups]
        out.append(sets)
        below = sets
    return out


def _aligned_features(got: dict, ref: dict) -> list | None:
    """Our level features in the recording's group order, when both hierarchies are one partition."""
    ref_sets, got_sets = _leaf_sets(ref["levels"]), _leaf_sets(got["levels"])
    if [set(s) for s in ref_sets] != [set(s) for s in got_sets]:
        return None
    return [
        [feats[sets.index(s)] for s in rsets] for feats, sets, rsets in zip(got["level_features"], got_sets, ref_sets)
    ]


def compare_within_tolerance(doc: dict, ours: Replay) -> ToleranceReport:
    """Compare with a recording made on a CPU of another capability.

    Paths must be equal. A hierarchy or executed windows may differ only where our own decision behind
    them was a near tie (clustering or logit margin within MARGIN_TOL); each such layer-forward is
    counted, and so are the near ties the replay followed the recording's way. Floats (loss, head
    statistics, level features; the latter group by group where only the order of a near-tie
    partition differs) must be within FLOAT_RTOL / FLOAT_ATOL. When a near tie
    changes the windows a forward executes, the two runs train on from different attention: the
    comparison stops there (the fork) and says so.
    """
    diffs: dict[str, list[str]] = {f: [] for f in FIELDS}
    near: list[str] = list(ours.followed)
    worst = {"loss": 0.0, "head_stats": 0.0, "level_features": 0.0}
    hierarchy_forwards = 0
    forked_at = None
    compared_steps = 0

    def check(key: str, got, ref, where: str) -> None:
        if (got is None) != (ref is None):
            diffs[key].append(where)
        elif got is not None:
            e = _excess(got, ref, ragged=key == "level_features")
            worst[key] = max(worst[key], e)
            if e > 1.0:
                diffs[key].append(where)

    for fwd, loss, layers in zip(doc["forwards"], ours.losses, ours.layers):
        floats = []  # (key, ours, recorded, where), checked unless this forward forks
        for i, (ref, got) in enumerate(zip(fwd["layers"] or [], layers)):
            where = f"{_where(fwd)} L{i}"
            if ref["path"] != got["path"]:
                diffs["path"].append(where)
            hierarchy_forwards += ref["levels"] is not None
            levels_tie = False
            if ref["levels"] == got["levels"]:
                floats.append(("level_features", got["level_features"], ref.get("level_features"), where))
            elif ref["levels"] is None or got["levels"] is None or got["levels_margin"] > MARGIN_TOL:
                diffs["levels"].append(where)
            else:
                levels_tie = True
                near.append(where)
                aligned = _aligned_features(got, ref)
                if aligned is not None:
                    floats.append(("level_features", aligned, ref.get("level_features"), where))
            if ref["executed_window_idx"] != got["windows"]:
                if levels_tie or got["windows_margin"] <= MARGIN_TOL:
                    forked_at = forked_at or where
                    if not levels_tie:
                        near.append(where)
                else:
                    diffs["windows"].append(where)
            floats.append(("head_stats", got["head_stats"], ref["head_stats_entropy_norm_usage"], where))
        if forked_at is not None:
            hierarchy_forwards -= sum(ref["levels"] is not None for ref in fwd["layers"] or [])
            break
        check("loss", loss, fwd["loss"], _where(fwd))
        for item in floats:
            check(*item)
        compared_steps = fwd["step"] + 1 if fwd["kind"] == "train" else compared_steps
    return ToleranceReport(diffs, near, hierarchy_forwards, worst, compared_steps, forked_at)
