"""Each regime trains 20 steps on the tiny preset and shows its defining behaviour (method §13)."""

import pytest
import torch

from aah_viz.coverage import acr
from aah_viz.regimes import REGIMES
from instrumentation import AAHConfig, AAHTransformer
from instrumentation.routing.features import head_features
from instrumentation.routing.hierarchy import fixed_random_partition

torch.set_num_threads(1)
STEPS = 20
UPDATES = [3, 8, 13, 18]  # warm-up 3, control interval 5


def run(regime, steps=STEPS, **kw):
    """Train ``steps`` steps; return the model and its layer-0 events by step."""
    torch.manual_seed(0)
    model = AAHTransformer(AAHConfig.from_preset("tiny", regime=regime, **kw))
    events, windows = [], []
    model.subscribe(lambda e: events.append(e) if e.layer == 0 else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for step in range(steps):
        model.prepare_step(step)
        data = torch.randint(0, 256, (2, 65), generator=g)
        out = model(data[:, :-1], targets=data[:, 1:])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        windows.append(model.current_windows().clone())
    assert torch.isfinite(out.loss)
    return model, {e.step: e for e in events}, windows


def level0(event):
    return sorted(sorted(g) for g in event.tree[0].members)


def test_registry_covers_the_issue_list():
    assert set(REGIMES) == {
        "full_attention",
        "grouping_off",
        "full_adaptive",
        "shallow_freeze",
        "deep_practical_reuse",
        "control_off",
        "fixed_window",
        "fixed_random_grouping",
        "freeze_after_warmup",
        "shuffle_post_select",
        "random_uniform",
        "independent_scoring",
        "no_feature_ema",
        "no_parent_constraint",
        "sliding_window",
        "local_global_layers",
        "head_windows",
    }


def test_full_attention():
    model, ev, wins = run("full_attention")
    assert model.aah_layers() == []
    assert all(acr(w.numpy(), 64) == 1.0 for w in wins)
    assert all(e.path_mode == "full_attention_fastpath" and e.tree is None for e in ev.values())


def test_full_adaptive():
    model, ev, wins = run("full_adaptive")
    assert [s for s, e in ev.items() if e.path_mode == "grouped_control_update"] == UPDATES
    for s in UPDATES:
        assert 1 <= len(ev[s].tree) <= 4 and ev[s].head_features is not None
    assert all(torch.all(w == 64) for w in wins[:3])


def test_grouping_off_scores_every_head_alone():
    _, ev, _ = run("grouping_off")
    for s in UPDATES:
        e = ev[s]
        assert e.path_mode == "ungrouped_control_update"
        assert len(e.tree) == 1 and e.tree[0].groups == [[h] for h in range(12)]
        assert not any(e.tree[0].joint_paired)
        assert torch.equal(e.tree[0].logits, e.tree[0].base_logits)
        assert torch.equal(e.window_idx.cpu(), e.tree[0].raw_idx)
    assert ev[0].tree is None  # no clustering at all, even in warm-up


def test_shallow_freeze_topology_never_changes_after_the_freeze():
    model, ev, _ = run("shallow_freeze")
    assert ev[3].path_mode == "grouped_control_update"  # the freeze point: first post-warm-up update
    frozen = [[list(g) for g in lvl.groups] for lvl in ev[3].tree]
    assert len(frozen) == 1  # max_depth 1
    for s in UPDATES[1:]:
        assert ev[s].path_mode == "grouped_control_frozen_learned_topology_update"
        assert [[list(g) for g in lvl.groups] for lvl in ev[s].tree] == frozen
    assert model.aah_layers()[0].state.topology == tuple(tuple(map(tuple, lvl)) for lvl in frozen)
    assert ev[3].froze_topology is True and ev[8].froze_topology is False
    assert all(ev[s].tree[0].joint_paired == [True] * len(frozen[0]) for s in UPDATES if len(frozen[0]) == 2)


def test_deep_practical_reuse_keeps_the_step0_partition():
    _, ev, _ = run("deep_practical_reuse")
    first = level0(ev[0])
    for s in UPDATES:
        assert ev[s].path_mode == "grouped_control_reuse_update"
        assert level0(ev[s]) == first
        assert ev[s].head_features is None  # no feature EMA on this path


def test_control_off_full_windows_and_rebuilt_hierarchy_every_step():
    model, ev, wins = run("control_off")
    assert all(torch.all(w == 64) for w in wins)
    for s in range(STEPS):
        e = ev[s]
        # the reference names the W path by apply_window_control alone, so warm-up steps included
        assert e.path_mode == "grouping_only_full_attention" and e.in_warmup == (s < 3)
        assert not e.applied
        assert e.updated and e.tree is not None and e.head_features is not None  # re-clustered from EMA features
    assert model.aah_layers()[0].state.cached_idx is None


@pytest.mark.parametrize("w", [8, 32])
def test_fixed_window_gives_every_head_that_window(w):
    _, ev, wins = run("fixed_window", fixed_window=w)
    assert all(torch.all(x == w) for x in wins)  # warm-up included (§8.5)
    assert ev[8].path_mode == "grouped_control_frozen_learned_topology_update"  # machinery still runs


def test_fixed_random_grouping():
    _, ev, _ = run("fixed_random_grouping")
    expected = sorted(sorted(g) for g in fixed_random_partition(12, 0))
    for s in UPDATES:
        assert ev[s].path_mode == "grouped_control_fixed_random_update"
        assert level0(ev[s]) == expected
        assert [len(lvl.groups) for lvl in ev[s].tree] == [2, 2, 2, 2]


def test_freeze_after_warmup_freezes_the_step0_partition():
    _, ev, _ = run("freeze_after_warmup")
    for s in UPDATES:
        assert ev[s].path_mode == "grouped_control_frozen_update"
        assert level0(ev[s]) == level0(ev[0])
        assert len(ev[s].tree) == 4  # passthrough to max_depth


def test_shuffle_post_select_permutes_the_selected_multiset():
    _, ev, _ = run("shuffle_post_select")
    moved = False
    for e in ev.values():
        pre = e.pre_execution_idx
        post = e.window_idx.cpu()
        assert sorted(pre.tolist()) == sorted(post.tolist())
        moved |= not torch.equal(pre, post)
    assert moved


def test_random_uniform_draws_windows():
    _, ev, _ = run("random_uniform")
    idx = torch.stack([e.window_idx.cpu() for e in ev.values()])
    assert idx.min() >= 0 and idx.max() <= 3 and len(torch.unique(idx)) == 4


def test_independent_scoring_has_no_joint_scorer():
    model, ev, _ = run("independent_scoring")
    assert all(a.joint_scorer is None for a in model.aah_layers())
    for s in UPDATES:
        for lvl in ev[s].tree:
            assert not any(lvl.joint_paired) and torch.equal(lvl.logits, lvl.base_logits)


def _update_features(regime):
    """Head features fed to clustering at the step-8 update, and the raw features of that forward."""
    torch.manual_seed(0)
    model = AAHTransformer(AAHConfig.from_preset("tiny", regime=regime))
    layer = model.aah_layers()[0]
    got = {}
    layer.c_attn.register_forward_hook(lambda mod, inp, out: got.__setitem__("qkv", out.detach()))
    layer.subscribe(lambda e: got.__setitem__("event", e))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for step in range(9):
        model.prepare_step(step)
        prev = None if layer.state.prev_stats is None else layer.state.prev_stats.clone()
        data = torch.randint(0, 256, (2, 65), generator=g)
        out = model(data[:, :-1], targets=data[:, 1:])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    q, k, v = (t.view(2, 64, 12, 8).transpose(1, 2) for t in got["qkv"].split(96, dim=2))
    return got["event"].head_features, head_features(q, k, v, prev)


def test_no_feature_ema_clusters_instantaneous_features():
    used, raw = _update_features("no_feature_ema")
    assert torch.allclose(used, raw)
    used, raw = _update_features("full_adaptive")
    assert not torch.allclose(used, raw)  # the EMA mixes in step 0 and step 3


def test_no_parent_constraint_executes_the_level0_raw_argmax():
    _, ev, _ = run("no_parent_constraint", control_interval=1)
    for s in range(3, STEPS):
        e = ev[s]
        assert torch.equal(e.window_idx.cpu(), e.raw_head_idx)
        assert torch.equal(e.tree[0].final_idx, e.tree[0].raw_idx)


def test_sliding_window_every_head_one_window():
    model, ev, wins = run("sliding_window", static_window=16)
    assert model.aah_layers() == []
    assert all(torch.all(w == 16) for w in wins)
    assert ev[0].path_mode == "static_window"


def test_local_global_layers_alternate():
    model, _, wins = run("local_global_layers", static_window=8)
    assert wins[-1][0].tolist() == [8] * 12 and wins[-1][1].tolist() == [64] * 12
