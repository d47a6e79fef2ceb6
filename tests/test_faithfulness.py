"""Adversarial faithfulness checks of the AAH-v3 state machine against the method spec.

Every expected value is recomputed here from the spec (features by hand in float64, clustering with
``clustering.cluster`` directly, EMA / resolution EMA / ramp by formula), never by calling the code
under test. The public state machine ``route_step`` is driven step by step on tiny shapes (H = 8,
T = 16, windows 2/4/8/16), executing its windows with the reference backend as a layer does, and
the checks read its returned state and decision.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from aah_viz.coverage import acr, causal_coverage
from aah_viz.regimes import REGIMES
from instrumentation import AAHConfig, AAHTransformer
from instrumentation.attention import AAHAttention
from instrumentation.backends.dense_masked import dense_masked_attention
from instrumentation.config import PRESETS
from instrumentation.routing.clustering import cluster
from instrumentation.routing.controller import level_inputs, score_level
from instrumentation.routing.step import RoutingInputs, initial_state, networks_for, route_step

torch.set_num_threads(1)

H, C, T = 8, 64, 16
WINDOWS = (2, 4, 8, 16)
FULL = 3  # index of T in WINDOWS


def cfg(regime="full_adaptive", **kw):
    base = dict(
        vocab_size=32,
        block_size=T,
        n_layer=1,
        n_head=H,
        n_embd=C,
        n_ff=64,
        windows=WINDOWS,
        w_min=1,
        warmup_steps=3,
        control_interval=2,
        min_group_size=2,
        dropout=0.0,
    )
    if "max_depth" not in REGIMES[regime].overrides:
        base["max_depth"] = 3
    base.update(kw)
    return AAHConfig.from_preset("tiny", regime=regime, **base)


def inputs(n, seed=1, T_=T):
    """Per-head q, k, v (B, H, T, D) for n forwards, in the model's memory layout.

    A per-forward scale and per-channel tilt make the head statistics move between forwards."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        x = torch.randn(3, 2, T_, C, generator=g) * (0.5 + torch.rand(3, 1, 1, C, generator=g) * (1 + i % 3))
        out.append([t.view(2, T_, H, C // H).transpose(1, 2) for t in x])
    return out


def _moments(x):
    x = x.reshape(-1)
    n = x.numel()
    m = x.mean()
    return [x.abs().mean().item(), math.sqrt(float(((x - m) ** 2).sum()) / (n - 1))]


def manual_features(q, k, v, prev):
    """§4.1: [mean|q|, unbiased std q, ... v, e, n, u] per head over B*T*D entries."""
    rows = []
    for h in range(q.shape[1]):
        r = []
        for t in (q, k, v):
            r += _moments(t[:, h])
        r += [0.0, 0.0, 0.0] if prev is None else [float(z) for z in prev[h]]
        rows.append(r)
    return torch.tensor(rows, dtype=torch.float32)


def manual_pooled(q, k, v, groups, prev):
    """§4.2: moments of the pooled raw entries of the group's heads; e/n/u averaged."""
    rows = []
    for g in groups:
        r = []
        for t in (q, k, v):
            r += _moments(t[:, list(g)])
        r += [0.0, 0.0, 0.0] if prev is None else prev[list(g)].double().mean(0).tolist()
        rows.append(r)
    return torch.tensor(rows, dtype=torch.float32)


def manual_stats(q, k, v, windows):
    """§11.2 for dropout 0: entropy / ln T, mean output norm, mass on the last key position."""
    B, _, T_, D = q.shape
    out = []
    for h in range(q.shape[1]):
        w = min(windows[h], T_)
        s = (q[:, h] @ k[:, h].transpose(-1, -2)) / math.sqrt(D)
        qi = torch.arange(T_)[:, None]
        ki = torch.arange(T_)[None, :]
        s = s.masked_fill(~((ki <= qi) & (ki >= qi - w + 1)), float("-inf"))
        p = torch.softmax(s, dim=-1)
        e = float((-(p * torch.log(p + 1e-9)).sum(-1)).mean()) / max(1.0, math.log(T_))
        n = float(torch.linalg.vector_norm(p @ v[:, h], dim=-1).mean())
        u = float(p[..., T_ - 1].mean())
        out.append([e, n, u])
    return torch.tensor(out)


def labels_of(groups, n=H):
    lab = [-1] * n
    for gid, g in enumerate(groups):
        for i in g:
            lab[i] = gid
    return tuple(lab)  # the state keeps labels as a tuple


def cluster0(X, c, prev_labels=None):
    return cluster(
        X,
        threshold=c.sim_threshold,
        metric="cosine",
        prev_labels=prev_labels,
        allow_forced_bipartition=True,
        min_group_size=c.min_group_size,
        churn_penalty=c.churn_penalty,
    )


def mean_rows(groups, X):
    return torch.stack([X[list(g)].mean(0) for g in groups])


def expected_upper(groups0, F0, c):
    """§5.3: upper levels over a level-0 partition; returns the group counts and the level features."""
    levels = [(groups0, F0)]
    if len(groups0) < 2:
        return levels
    while len(levels) < c.max_depth:
        Fb = levels[-1][1]
        res = cluster(
            Fb,
            threshold=c.super_threshold,
            metric=c.upper_cluster_metric,
            allow_forced_bipartition=False,
            min_group_size=c.min_group_size,
            normdiff_scale=c.cosine_normdiff_scale,
        )
        if len(res.groups) == 1:
            break
        levels.append((res.groups, mean_rows(res.groups, Fb)))
    return levels


def passthrough(groups0, F0, depth):
    levels = [(groups0, F0)]
    while len(levels) < depth:
        n = len(levels[-1][0])
        levels.append(([[i] for i in range(n)], levels[-1][1]))
    return levels


class Driver:
    """Drives ``route_step`` forward by forward like one layer: route, execute, keep the statistics."""

    def __init__(self, regime="full_adaptive", seed=0, **kw):
        self.cfg = cfg(regime, **kw)
        torch.manual_seed(seed)
        self.nets = networks_for(self.cfg)
        self.state = initial_state(self.cfg)

    def step(self, s, qkv, want_tree=True, training=True):
        q, k, v = qkv
        prev = None if self.state.prev_stats is None else self.state.prev_stats.detach().cpu().double().clone()
        inp = RoutingInputs(q, k, v, step=s, want_tree=want_tree)
        self.state, d = route_step(self.state, inp, self.cfg, self.nets)
        wins = [WINDOWS[i] for i in d.executed.tolist()]
        res = dense_masked_attention(q, k, v, wins, need_stats=True, dropout_p=self.cfg.dropout, training=training)
        self.state = self.state.with_stats(res.stats.matrix())
        qd, kd, vd = (t.double() for t in qkv)
        return dict(d=d, prev=prev, q=qd, k=kd, v=vd, f=manual_features(qd, kd, vd, prev), executed=d.executed)


def layer_qkv(layer, x):
    """A model layer's per-head q, k, v (float64) of its input ``x`` (B, T, C)."""
    B, T_, _ = x.shape
    with torch.no_grad():
        q, k, v = layer.c_attn(x).split(C, dim=2)
    return [t.reshape(B, T_, H, C // H).transpose(1, 2).double() for t in (q, k, v)]


def close(a, b, tol=1e-4):
    return torch.allclose(
        torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), rtol=tol, atol=tol
    )


def check_tree(ev, groups0, F0, c, upper="grow"):
    """Level 0 must be ``groups0`` with feature rows ``F0`` (recomputed here); the upper levels must be
    what §5.3 (``grow``) or the passthrough of §5.9 builds on top. The upper expectation is built from
    the layer's own float32 level-0 rows once they are checked close to ``F0``: clustering decisions
    (e.g. the forced-split anchor of a float32-asymmetric matrix) may hinge on the last bit."""
    assert [list(g) for g in ev.tree[0].groups] == [list(g) for g in groups0]
    assert close(ev.tree[0].features, F0), (ev.tree[0].features, F0)
    own = ev.tree[0].features.float()
    levels = expected_upper(groups0, own, c) if upper == "grow" else passthrough(groups0, own, c.max_depth)
    assert_tree(ev, levels)


def assert_tree(ev, levels):
    assert [len(lv.groups) for lv in ev.tree] == [len(g) for g, _ in levels]
    for lv, (groups, feats) in zip(ev.tree, levels):
        assert [list(g) for g in lv.groups] == [list(g) for g in groups]
        assert close(lv.features, feats), (lv.level, lv.features, feats)


def topology(state):
    """The stored topology as lists of lists, to compare with groups read from a tree."""
    return [[list(g) for g in level] for level in state.topology]


def set_logits(driver, favoured):
    """Make the controller output a constant logit vector that favours ``favoured`` (pairwise none)."""
    lin = driver.nets.controller.net[-1]
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.copy_(torch.tensor([1.0 if i == favoured else 0.0 for i in range(len(WINDOWS))]))


# ----------------------------------------------------------------------------- 1. warm-up path
def test_warmup_step0_clusters_then_rebuilds_from_cached_labels_with_pooled_features():
    L = Driver(warmup_steps=5, control_interval=2)
    c = L.cfg
    xs = inputs(5)
    r0 = L.step(0, xs[0])
    assert r0["prev"] is None and close(L.state.ema, r0["f"])  # EMA initialised from f(step 0)
    res0 = cluster0(L.state.ema, c)
    labels0 = labels_of(res0.groups)
    assert L.state.cached_labels == labels0
    check_tree(r0["d"], res0.groups, mean_rows(res0.groups, r0["f"]), c)
    ema0 = L.state.ema.clone()
    groups = [[h for h in range(H) if labels0[h] == g] for g in range(max(labels0) + 1)]
    rebuilt = []
    for s in range(1, 5):
        r = L.step(s, xs[s])
        assert torch.equal(L.state.ema, ema0)  # not touched during steps 1..warmup-1
        assert L.state.cached_labels == labels0
        assert r["d"].in_warmup and not r["d"].applied and r["d"].path_mode == "warmup_or_disabled_control"
        assert r["executed"].tolist() == [FULL] * H
        if r["d"].tree is not None:
            rebuilt.append(s)
            check_tree(r["d"], groups, manual_pooled(r["q"], r["k"], r["v"], groups, r["prev"]), c)
            assert r["d"].shadow_idx.shape == (H,)
            assert r["d"].head_features is None
        assert r["d"].group_change_rate == 0.0  # rebuilt from (or skipping with) the cached labels
    assert rebuilt == [1, 3]  # pooled features recomputed at most once per control interval
    assert L.state.res_ema is None and L.state.cached_idx is None and L.state.last_control_step is None


def test_warmup_executes_index_zero_when_T_is_not_a_candidate():
    L = Driver(warmup_steps=3)
    r = L.step(0, inputs(1, T_=12)[0])
    assert r["executed"].tolist() == [0] * H  # §15.13: smallest window, not the largest


def test_shadow_decision_only_with_apply_window_control():
    L = Driver(warmup_steps=3, apply_window_control=False)
    for s, x in enumerate(inputs(3)):
        r = L.step(s, x, want_tree=False)  # no subscriber: the shadow decision is not taken
        assert r["d"].shadow_idx is None
        assert L.state.executed_idx.tolist() == [FULL] * H


# ----------------------------------------------------------------------------- 2. first update, EMA, due rule
def test_first_post_warmup_update_and_later_updates_follow_the_ema_and_due_rule():
    L = Driver(warmup_steps=3, control_interval=3)
    c = L.cfg
    xs = inputs(12)
    rs = [L.step(s, xs[s]) for s in range(3)]
    ema = rs[0]["f"].clone()
    labels = labels_of(cluster0(L.state.ema, c).groups)
    updates = []
    for s in range(3, 12):
        r = L.step(s, xs[s])
        ev = r["d"]
        if ev.updated:
            updates.append(s)
            ema = 0.9 * ema + 0.1 * r["f"]  # alpha weights the OLD value
            assert close(L.state.ema, ema)
            res = cluster0(L.state.ema, c, prev_labels=labels)
            check_tree(ev, res.groups, mean_rows(res.groups, ema), c)
            labels = labels_of(res.groups)
            assert L.state.cached_labels == labels
            assert ev.path_mode == "grouped_control_update"
            cached = L.state.cached_idx.clone()
        else:
            assert ev.path_mode == "grouped_control_cached"
            assert torch.equal(ev.idx, cached)  # C1 reuses the indices
            assert close(L.state.ema, ema)  # untouched on cached steps
    assert updates == [3, 6, 9]


def test_due_rule_uses_the_distance_to_the_last_control_step():
    L = Driver(warmup_steps=0, control_interval=3)
    xs = inputs(6)
    seen = [(s, L.step(s, x)["d"].updated) for s, x in zip([0, 2, 4, 5, 6, 7], xs)]
    # 0: first update; 2: 2 < 3 cached; 4: 4 >= 3 update; 5, 6: cached; 7: 3 >= 3 update
    assert seen == [(0, True), (2, False), (4, True), (5, False), (6, False), (7, True)]
    L1 = Driver(warmup_steps=0, control_interval=1)
    assert all(L1.step(3, x)["d"].updated for x in inputs(3))  # interval <= 1: every forward


# ----------------------------------------------------------------------------- 3. structure modes
def test_freeze_learned_topology_stores_at_the_first_update_then_uses_pooled_features():
    L = Driver("shallow_freeze", warmup_steps=2, control_interval=2, max_depth=2)
    c = L.cfg
    xs = inputs(9)
    rs = [L.step(s, xs[s]) for s in range(2)]
    assert L.state.topology is None  # warm-up never stores it
    labels0 = L.state.cached_labels
    ema = 0.9 * rs[0]["f"]
    r = L.step(2, xs[2])
    ema = ema + 0.1 * r["f"]
    assert close(L.state.ema, ema)
    res = cluster0(L.state.ema, c, prev_labels=labels0)
    check_tree(r["d"], res.groups, mean_rows(res.groups, ema), c)
    topo = [[list(g) for g in lv.groups] for lv in r["d"].tree]
    assert topology(L.state) == topo and r["d"].froze_topology is True
    frozen_ema = L.state.ema.clone()
    for s in range(3, 9):
        r = L.step(s, xs[s])
        if r["d"].updated:
            assert r["d"].path_mode == "grouped_control_frozen_learned_topology_update"
            F0 = manual_pooled(r["q"], r["k"], r["v"], topo[0], r["prev"])
            exp = [(topo[0], F0)]
            for groups in topo[1:]:
                exp.append((groups, mean_rows(groups, exp[-1][1])))
            assert_tree(r["d"], exp)  # the stored groups at every level, no re-clustering
            assert r["d"].group_change_rate == 0.0
        assert torch.equal(L.state.ema, frozen_ema)


def test_shallow_freeze_with_max_depth_1_is_the_forced_pair():
    L = Driver("shallow_freeze", warmup_steps=1, control_interval=1)
    xs = inputs(4)
    L.step(0, xs[0])
    labels0 = L.state.cached_labels
    r1 = L.step(1, xs[1])
    res = cluster0(L.state.ema, L.cfg, prev_labels=labels0)
    assert res.origin == "forced_bipartition"  # positive features collapse at initialisation (§5.2)
    assert r1["d"].group_counts == [2] and topology(L.state) == [[list(g) for g in res.groups]]
    r2 = L.step(2, xs[2])
    assert r2["d"].group_counts == [2] and r2["d"].tree[0].joint_paired == [True, True]


def test_deep_practical_reuse_keeps_the_step0_partition_with_pooled_features():
    L = Driver("deep_practical_reuse", warmup_steps=2, control_interval=1)
    c = L.cfg
    xs = inputs(6)
    L.step(0, xs[0])
    groups = cluster0(L.state.ema, c).groups
    ema0 = L.state.ema.clone()
    g_sorted = [sorted(g) for g in groups]
    for s in range(1, 6):
        r = L.step(s, xs[s])
        check_tree(r["d"], g_sorted, manual_pooled(r["q"], r["k"], r["v"], g_sorted, r["prev"]), c)
        if s >= 2:
            assert r["d"].path_mode == "grouped_control_reuse_update" and r["d"].group_change_rate == 0.0
        assert torch.equal(L.state.ema, ema0)  # no feature EMA on this path


@pytest.mark.parametrize("mode", ["freeze_after_warmup", "fixed_random", "fixed_deterministic"])
def test_passthrough_modes(mode):
    L = Driver(hierarchy_ablation_mode=mode, warmup_steps=2, control_interval=1, fixed_hierarchy_seed=5)
    c = L.cfg
    xs = inputs(5)
    r0 = L.step(0, xs[0])
    res0 = cluster0(L.state.ema, c)
    # step 0 still clusters adaptively (shadow decision), even for the fixed modes
    check_tree(r0["d"], res0.groups, mean_rows(res0.groups, r0["f"]), c)
    if mode == "freeze_after_warmup":
        groups = [sorted(g) for g in res0.groups]
    elif mode == "fixed_random":
        perm = torch.randperm(H, generator=torch.Generator().manual_seed(5)).tolist()
        groups = [sorted(perm[: H // 2]), sorted(perm[H // 2 :])]
    else:
        groups = [[h for h in range(H) if h % 2 == 0], [h for h in range(H) if h % 2 == 1]]
    L.step(1, xs[1])
    for s in range(2, 5):
        r = L.step(s, xs[s])
        check_tree(r["d"], groups, manual_pooled(r["q"], r["k"], r["v"], groups, r["prev"]), c, upper="passthrough")
        assert r["d"].group_change_rate == 0.0


# ----------------------------------------------------------------------------- 4. grouping off
def test_grouping_off_scores_raw_features_single_level_without_pairwise_term():
    L = Driver("grouping_off", warmup_steps=1, control_interval=1, controller_pairwise_mode="joint_sibling")
    xs = inputs(3)
    r0 = L.step(0, xs[0])
    assert r0["d"].tree is None and r0["executed"].tolist() == [FULL] * H
    for s in (1, 2):
        r = L.step(s, xs[s])
        ev = r["d"]
        f = r["f"]  # raw, un-smoothed
        assert close(ev.tree[0].features, f) and L.state.ema is None
        x = torch.cat(
            [f, torch.zeros(H, 1), torch.zeros(H, 9), f - f.mean(0, keepdim=True), torch.full((H, 1), 1.0 / H)], dim=1
        )
        with torch.no_grad():
            base = L.nets.controller(x)
        assert close(ev.tree[0].base_logits, base) and close(ev.tree[0].logits, base)  # no joint scorer
        exp = torch.tensor([int(torch.argmax(row)) for row in base])
        assert torch.equal(ev.idx, exp)
        assert ev.group_change_rate is None and ev.group_counts == [H]


# ----------------------------------------------------------------------------- 5. control off
def test_control_off_set_control_clears_and_reclusters_every_step():
    torch.manual_seed(0)
    model = AAHTransformer(cfg("control_off", warmup_steps=2, control_interval=5))
    model.train()
    L = model.aah_layers()[0]
    c = L.cfg
    events = []
    L.subscribe(events.append)
    g = torch.Generator().manual_seed(3)
    ema = None
    for s in range(6):
        model.prepare_step(s)
        assert L.state.cached_labels is None and L.state.pooled_cache is None and L.state.res_ema is None
        assert L.state.cached_group_counts is None and L.state.last_control_step is None
        prev = None if L.state.prev_stats is None else L.state.prev_stats.double().clone()
        captured = {}
        h = model.h[0].ln_1.register_forward_hook(lambda m, i, o: captured.setdefault("x", o.detach()))
        tok = torch.randint(0, 32, (2, T), generator=g)
        with torch.no_grad():
            model(tok)
        h.remove()
        q, k, v = layer_qkv(L, captured["x"])
        f = manual_features(q, k, v, prev)
        ema = f if ema is None else 0.9 * ema + 0.1 * f  # feature EMA survives set_control(False)
        assert close(L.state.ema, ema)
        res = cluster0(L.state.ema, c)  # no churn: the labels were cleared
        assert [list(gr) for gr in events[-1].tree[0].groups] == [list(gr) for gr in res.groups]
        assert L.state.executed_idx.tolist() == [FULL] * H and not events[-1].applied
        assert events[-1].path_mode == "grouping_only_full_attention"  # warm-up steps too


# ----------------------------------------------------------------------------- 6. post-processing
def test_resolution_ema_runs_on_cached_steps_worked_example_6():
    L = Driver(warmup_steps=2, control_interval=3, resolution_ema_alpha=0.3, controller_pairwise_mode="none")
    xs = inputs(8)
    set_logits(L, 3)
    out = [L.step(s, xs[s])["executed"][0].item() for s in range(5)]
    assert L.state.res_ema is not None and out == [3, 3, 3, 3, 3]
    set_logits(L, 0)
    r5 = L.step(5, xs[5])  # update: r = 0.3 * 3 + 0.7 * 0 = 0.9 -> executed 1 (§12 example 6)
    assert r5["d"].updated and r5["d"].idx.tolist() == [0] * H
    assert r5["executed"].tolist() == [1] * H and close(L.state.res_ema, torch.full((H,), 0.9))
    r6 = L.step(6, xs[6])  # cached, but the EMA still advances: r = 0.27 -> 0
    assert not r6["d"].updated and r6["executed"].tolist() == [0] * H
    assert close(L.state.res_ema, torch.full((H,), 0.27))
    assert L.state.cached_idx.tolist() == [0] * H  # the cached raw index is left untouched


def test_post_processing_order_ema_then_ramp():
    L = Driver(
        warmup_steps=2,
        control_interval=1,
        resolution_ema_alpha=0.3,
        post_warmup_ramp_steps=4,
        controller_pairwise_mode="none",
    )
    xs = inputs(7)
    set_logits(L, 3)
    got, exp, r = [], [], None
    for s in range(7):
        if s == 3:
            set_logits(L, 0)
        got.append(L.step(s, xs[s])["executed"][0].item())
        if s < 2:
            exp.append(FULL)
            continue
        idx = 3 if s == 2 else 0
        r = float(idx) if r is None else 0.3 * r + 0.7 * idx
        e = min(3, max(0, round(r)))
        p = min(1.0, max(0.0, (s - 2 + 1) / 4))
        exp.append(e if p >= 1 else round(p * e + (1 - p) * FULL))
    assert got == exp == [3, 3, 3, 2, 1, 0, 0]


def test_window_override_applies_in_warmup_and_cached_steps_after_the_ema():
    L = Driver(
        "fixed_window",
        fixed_window=4,
        warmup_steps=2,
        control_interval=3,
        resolution_ema_alpha=0.3,
        controller_pairwise_mode="none",
    )
    set_logits(L, 3)
    xs = inputs(6)
    for s in range(6):
        if s == 3:
            set_logits(L, 0)
        assert L.step(s, xs[s])["executed"].tolist() == [1] * H
    # the EMA state follows the selected indices, not the override: 3, 3, 3 -> r(5) = 0.3*3 + 0.7*0
    assert close(L.state.res_ema, torch.full((H,), 0.9))


# ----------------------------------------------------------------------------- 7. features and statistics
def test_features_and_previous_forward_statistics():
    L = Driver(warmup_steps=0, control_interval=1)
    xs = inputs(3)
    r0 = L.step(0, xs[0])
    assert close(r0["d"].head_features, r0["f"]) and r0["f"][:, 6:].abs().sum() == 0  # zero on the first
    for s in (1, 2):
        before = L.state.executed_idx.tolist()
        prev_q = [t.double() for t in xs[s - 1]]
        exp_stats = manual_stats(*prev_q, [WINDOWS[i] for i in before])
        assert close(L.state.prev_stats, exp_stats)
        r = L.step(s, xs[s])
        assert close(r["f"][:, 6:], exp_stats)
    assert L.state.ema.dtype == torch.float32


def test_statistics_use_post_dropout_probabilities():
    def stats(training):
        torch.manual_seed(0)
        L = AAHAttention(cfg(warmup_steps=5, dropout=0.5, eval_mutates_routing=True), 0, project=False)
        L.train(training)
        L.set_step(0)
        with torch.no_grad():
            L.attend(*inputs(1)[0])
        return L.state.prev_stats

    clean = stats(False)
    noisy = stats(True)
    # Post-dropout rows hold 0 or P/(1-p): with p = 0.5 the entropy drops by about ln 2 per row, i.e.
    # ln 2 / ln T in normalised units (pre-dropout probabilities would show no drop at all).
    drop = float((clean[:, 0] - noisy[:, 0]).mean())
    assert abs(drop - math.log(2) / math.log(T)) < 0.05


# ----------------------------------------------------------------------------- 8. inputs, scorer, selection
def test_enriched_inputs_order_parent_rows_offset_and_sizes():
    torch.manual_seed(0)
    F0 = torch.rand(5, 9)
    F1 = torch.rand(2, 9)
    F2 = torch.rand(1, 9)
    sizes = [[2, 1, 3, 1, 1], [3, 2], [2]]
    parents = [[0, 0, 1, 0, 1], [0, 0]]
    out = level_inputs([F0, F1, F2], sizes, parents, "enriched")
    for lvl, (Fl, par) in enumerate(zip([F0, F1, F2], parents + [None])):
        exp = torch.cat(
            [
                Fl,
                torch.full((Fl.shape[0], 1), lvl / 2),
                torch.zeros_like(Fl) if par is None else Fl - [F1, F2][lvl][par],
                Fl - Fl.mean(0, keepdim=True),
                torch.tensor(sizes[lvl], dtype=torch.float32)[:, None] / sum(sizes[lvl]),
            ],
            dim=1,
        )
        assert out[lvl].shape == (Fl.shape[0], 29) and close(out[lvl], exp)


def _manual_mlp(seq, x):
    lins = [m for m in seq if isinstance(m, torch.nn.Linear)]
    for i, lin in enumerate(lins):
        x = x @ lin.weight.T + lin.bias
        if i < len(lins) - 1:
            x = F.gelu(x)
    return x


def test_joint_scorer_replaces_rows_pairs_siblings_and_bias_adds():
    L = Driver(joint_output_scale=0.7)
    nets = L.nets
    torch.manual_seed(1)
    x = torch.rand(5, 29)
    parent = [1, 0, 1, 0, 1]  # children of 0: 1, 3; of 1: 0, 2, 4 (4 unpaired)
    with torch.no_grad():
        s = score_level(nets, x, parent, "joint_sibling")
        base = _manual_mlp(nets.controller.net, x)
        exp = base.clone()
        for a, b in [(1, 3), (0, 2)]:
            z = _manual_mlp(nets.joint.net, torch.cat([x[a], x[b], x[a] - x[b], x[b] - x[a]])) * 0.7
            exp[a], exp[b] = z[:4], z[4:]
        assert close(s.base_logits, base) and close(s.logits, exp) and s.paired == [True, True, True, True, False]
        top = score_level(nets, x, None, "joint_sibling")
        assert top.pairs == [(0, 1), (2, 3)]
        assert score_level(nets, x, parent, "none").logits.equal(score_level(nets, x, parent, "none").base_logits)
    Lb = Driver(controller_pairwise_mode="sibling_bias", pairwise_bias_scale=0.5)
    with torch.no_grad():
        sb = score_level(Lb.nets, x, parent, "sibling_bias")
        sib = torch.stack(
            [x[i] - x[[j for j in range(5) if parent[j] == parent[i] and j != i]].mean(0) for i in range(5)]
        )
        exp_b = _manual_mlp(Lb.nets.controller.net, x) + 0.5 * _manual_mlp(Lb.nets.sibling_bias.net, sib)
        assert close(sb.logits, exp_b)


def test_top_down_selection_on_a_real_tree_obeys_argmax_and_parent_min():
    L = Driver(warmup_steps=0, control_interval=1, max_depth=4, sim_threshold=0.999, min_group_size=1)
    counts = []
    for s, x in enumerate(inputs(4)):
        ev = L.step(s, x)["d"]
        counts.append([len(lv.groups) for lv in ev.tree])
        top = len(ev.tree) - 1
        for lvl in range(top, -1, -1):
            lv = ev.tree[lvl]
            n = len(lv.groups)
            # §7.2 pairing: consecutive at the top, consecutive among same-parent children below
            if lv.parent is None:
                pairs = [(i, i + 1) for i in range(0, n - 1, 2)]
            else:
                pairs = []
                for p in sorted(set(lv.parent)):
                    kids = [i for i in range(n) if lv.parent[i] == p]
                    pairs += [(kids[j], kids[j + 1]) for j in range(0, len(kids) - 1, 2)]
            paired = [any(i in pr for pr in pairs) for i in range(n)]
            assert lv.joint_paired == paired
            for i in range(n):
                if not paired[i]:
                    assert torch.equal(lv.logits[i], lv.base_logits[i])  # unpaired rows keep base logits
            raw = torch.tensor([min(i for i in range(4) if row[i] == row.max()) for row in lv.logits])
            assert torch.equal(lv.raw_idx, raw)
            if lvl == top:
                assert torch.equal(lv.final_idx, raw)
            else:
                par = ev.tree[lvl + 1].final_idx[torch.tensor(lv.parent)]
                assert torch.equal(lv.final_idx, torch.minimum(raw, par))
        labels = labels_of(ev.tree[0].groups)
        assert ev.idx.tolist() == [int(ev.tree[0].final_idx[labels[h]]) for h in range(H)]
    assert max(len(c) for c in counts) == 4 and any(c[0] > c[1] for c in counts if len(c) > 1)  # real trees


def test_argmax_takes_the_lowest_index_on_ties():
    L = Driver(warmup_steps=0, controller_pairwise_mode="none")
    with torch.no_grad():
        L.nets.controller.net[-1].weight.zero_()
        L.nets.controller.net[-1].bias.copy_(torch.tensor([0.0, 2.0, 2.0, 2.0]))
    assert L.step(0, inputs(1)[0])["executed"].tolist() == [1] * H


def test_backbone_identical_across_controller_variants_and_rng_stream():
    def build(**kw):
        torch.manual_seed(0)
        m = AAHTransformer(cfg(**kw))
        return [p.detach().clone() for p in m.backbone_parameters()], torch.rand(3)

    ref, ref_after = build(controller_input_mode="base", controller_pairwise_mode="none")
    for kw in (
        dict(),
        dict(controller_arch="deep_mlp"),
        dict(control_dim=40, controller_pairwise_mode="sibling_bias"),
        dict(controller_input_mode="contrastive", joint_hidden_dim=0),
    ):
        got, after = build(**kw)
        assert all(torch.equal(a, b) for a, b in zip(ref, got)) and torch.equal(ref_after, after)


# ----------------------------------------------------------------------------- 9. stand-alone inference
@pytest.mark.parametrize("regime", ["full_adaptive", "shallow_freeze", "deep_practical_reuse"])
def test_standalone_inference_every_forward_is_a_post_warmup_update(regime):
    L = Driver(regime, warmup_steps=50, control_interval=5, eval_mutates_routing=True)
    xs = inputs(3)
    r1 = L.step(None, xs[0])
    assert r1["d"].updated and r1["d"].applied and not r1["d"].in_warmup
    assert r1["d"].path_mode == "grouped_control_update" and close(L.state.ema, r1["f"])
    groups1 = cluster0(L.state.ema, L.cfg).groups
    for x in xs[1:]:
        r = L.step(None, x)
        assert r["d"].updated and r["d"].applied
        if regime == "full_adaptive":
            assert r["d"].path_mode == "grouped_control_update"
        elif regime == "shallow_freeze":  # topology learned from the first evaluation batch
            assert r["d"].path_mode == "grouped_control_frozen_learned_topology_update"
            assert topology(L.state) == [[list(g) for g in groups1]]
        else:  # level-0 partition from the first evaluation batch
            assert r["d"].path_mode == "grouped_control_reuse_update"
            assert [sorted(g) for g in r["d"].tree[0].groups] == [sorted(g) for g in groups1]


def test_standalone_inference_ema_advances_per_batch():
    L = Driver(warmup_steps=50, eval_mutates_routing=True)
    xs = inputs(3)
    ema = None
    for x in xs:
        f = L.step(None, x)["f"]
        ema = f if ema is None else 0.9 * ema + 0.1 * f
        assert close(L.state.ema, ema)


# ----------------------------------------------------------------------------- 10. accounting and rates
def test_acr_w_min_only_in_accounting_and_causal_coverage():
    assert acr([[512, 512, 1024, 4096]] * 2, 4096) == pytest.approx(0.375)  # §12 example 7
    assert acr([2, 16], 16, w_min=4) == pytest.approx((4 + 16) / 32)
    assert causal_coverage([2, 16], 16) == pytest.approx((sum(min(t + 1, 2) for t in range(16)) + 136) / 272)
    torch.manual_seed(0)
    model = AAHTransformer(cfg("fixed_window", fixed_window=2, w_min=4))
    model.eval()
    probs = model(torch.randint(0, 32, (1, T)), return_attentions=True).attentions[0]
    assert int((probs[0, 0] > 0).sum(-1).max()) == 2  # executed with W = 2, not the W_min of 4


def test_group_change_rate_and_resolution_delta():
    L = Driver(warmup_steps=1, control_interval=2)
    xs = inputs(7)
    r0 = L.step(0, xs[0])  # first clustering ever: 0.0 (the reference's value), not None
    assert r0["d"].resolution_delta is None and r0["d"].group_change_rate == 0.0
    r1 = L.step(1, xs[1])  # first update: no previous indices
    assert r1["d"].resolution_delta is None
    prev_idx = L.state.cached_idx.clone()
    old = L.state.cached_labels
    swapped = [max(old) - g for g in old]  # same co-membership, other ids: the rate is label-sensitive
    L.state = L.state.replace(cached_labels=tuple(swapped))
    r2 = L.step(2, xs[2])
    assert not r2["d"].updated and r2["d"].group_change_rate == 0.0 and r2["d"].resolution_delta == 0.0
    r3 = L.step(3, xs[3])
    new = labels_of(r3["d"].tree[0].groups)
    assert r3["d"].group_change_rate == pytest.approx(sum(a != b for a, b in zip(new, swapped)) / H)
    assert r3["d"].resolution_delta == pytest.approx(float((L.state.cached_idx - prev_idx).abs().float().mean()))
    Lg = Driver("grouping_off", warmup_steps=1, control_interval=2)
    rates = [Lg.step(s, x)["d"] for s, x in enumerate(inputs(3))]
    assert [e.updated for e in rates] == [False, True, False]
    # None without grouping (warm-up and updates); a cached forward reports 0.0 like the reference
    assert [e.group_change_rate for e in rates] == [None, None, 0.0]


# ----------------------------------------------------------------------------- 11. regimes and presets
SECTION_13 = {
    "full_attention": dict(
        enabled=False, build_hierarchy=False, apply_window_control=False, controller_pairwise_mode="none"
    ),
    "grouping_off": dict(build_hierarchy=False, controller_pairwise_mode="none"),
    "full_adaptive": {},
    "shallow_freeze": dict(max_depth=1, hierarchy_ablation_mode="freeze_learned_topology"),
    "deep_practical_reuse": dict(reuse_group_hierarchy=True),
    "control_off": dict(apply_window_control=False),
    "fixed_random_grouping": dict(hierarchy_ablation_mode="fixed_random"),
    "freeze_after_warmup": dict(hierarchy_ablation_mode="freeze_after_warmup"),
    "independent_scoring": dict(controller_pairwise_mode="none"),
    "no_feature_ema": dict(ema_alpha=0.0),
    "no_parent_constraint": dict(parent_constraint=False),
    "fixed_window": dict(
        max_depth=1,
        hierarchy_ablation_mode="freeze_learned_topology",
        window_ablation_mode="fixed_window",
        fixed_window=1024,
    ),
    "shuffle_post_select": dict(
        max_depth=1, hierarchy_ablation_mode="freeze_learned_topology", window_ablation_mode="shuffle_post_select"
    ),
    "random_uniform": dict(
        max_depth=1, hierarchy_ablation_mode="freeze_learned_topology", window_ablation_mode="random_uniform"
    ),
}
PAPER_BASE = dict(
    vocab_size=50257,
    block_size=4096,
    n_layer=16,
    n_head=12,
    n_embd=1536,
    n_ff=6144,
    windows=(512, 1024, 2048, 4096),
    enabled=True,
    build_hierarchy=True,
    apply_window_control=True,
    control_dim=16,
    control_interval=5,
    sim_threshold=0.72,
    super_threshold=0.76,
    max_depth=4,
    ema_alpha=0.9,
    churn_penalty=0.02,
    min_group_size=3,
    warmup_steps=100,
    w_min=64,
    resolution_ema_alpha=0.15,
    post_warmup_ramp_steps=0,
    group_feature_mode="mean",
    upper_cluster_metric="cosine_normdiff",
    upper_l2_threshold=0.0,
    cosine_normdiff_scale=16.0,
    controller_input_mode="enriched",
    controller_arch="mlp",
    controller_logit_scale=1.0,
    controller_rng_reference_dim=16,
    controller_choice_mode="learned",
    controller_pairwise_mode="joint_sibling",
    pairwise_bias_scale=1.0,
    joint_output_scale=1.0,
    joint_hidden_dim=64,
    reuse_group_hierarchy=False,
    hierarchy_ablation_mode="adaptive",
    fixed_hierarchy_seed=0,
    parent_constraint=True,
    window_ablation_mode="adaptive",
    fixed_window=0,
    window_ablation_seed=0,
    dropout=0.1,
    attention_backend="dense_masked",
    controller_training="none",
    controller_float32=False,
    fix_group_ratios=False,
)


@pytest.mark.parametrize("regime", sorted(SECTION_13))
def test_regime_flags_match_section_13(regime):
    kw = dict(fixed_window=1024) if regime == "fixed_window" else {}
    got = AAHConfig.from_preset("paper-1b", regime=regime, **kw).to_dict()
    exp = dict(PAPER_BASE, **SECTION_13[regime])
    assert {k: got[k] if k != "windows" else tuple(got[k]) for k in exp} == exp


def test_paper_1b_preset_is_the_section_16_shape():
    v = PRESETS["paper-1b"].values
    assert (v["n_layer"], v["n_head"], v["n_embd"], v["n_ff"], v["block_size"], v["vocab_size"]) == (
        16,
        12,
        1536,
        6144,
        4096,
        50257,
    )
    assert v["n_embd"] // v["n_head"] == 128
    assert set(REGIMES) >= set(SECTION_13)
