"""AAHTransformer: the backbone, the state machine's invariants, checkpoints, eval, hooks, gradients."""

import io

import pytest
import torch

from aah_viz.coverage import acr
from aah_viz.errors import ConfigError
from instrumentation import AAHConfig, AAHTransformer, RoutingEvent
from instrumentation.attention import AAHAttention

torch.set_num_threads(1)


def make(regime="full_adaptive", seed=0, **kw):
    torch.manual_seed(seed)
    return AAHTransformer(AAHConfig.from_preset("tiny", regime=regime, **kw))


def batches(n, seed=0, B=2, T=64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (B, T + 1), generator=g) for _ in range(n)]


def train(model, steps, *, seed=0, lr=1e-3, start=0, on_step=None):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    model.train()
    for step, data in enumerate(batches(steps, seed), start=start):
        model.prepare_step(step)
        out = model(data[:, :-1], targets=data[:, 1:])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        if on_step is not None:
            on_step(step, out)
    return opt


def test_forward_shapes_and_loss():
    m = make()
    x = batches(1)[0]
    out = m(x[:, :-1], targets=x[:, 1:])
    assert out.logits.shape == (2, 64, 256) and out.loss.ndim == 0 and torch.isfinite(out.loss)
    assert out.attentions is None
    assert m(x[:, :-1]).loss is None
    assert m.current_windows().shape == (2, 12) and m.current_windows().dtype == torch.long


def test_weight_tying_and_no_attention_bias():
    m = make()
    assert m.lm_head.weight is m.wte.weight
    for a in m.aah_layers():
        assert a.c_attn.bias is None and a.c_proj.bias is None


def test_paper_1b_parameter_counts_on_meta():
    counts = {}
    for regime in ("full_attention", "full_adaptive"):
        with torch.device("meta"):
            counts[regime] = AAHTransformer(AAHConfig.from_preset("paper-1b", regime=regime)).num_parameters()
    assert counts == {"full_attention": 536_695_296, "full_adaptive": 536_832_192}


def test_input_longer_than_block_size_is_an_error():
    m = make()
    with pytest.raises(ConfigError, match="block_size"):
        m(torch.zeros(1, 65, dtype=torch.long))


def test_attentions_are_dense_probabilities_with_the_executed_windows():
    m = make(control_interval=1)
    train(m, 5)
    m.eval()
    x = batches(1, seed=3)[0][:, :-1]
    out = m(x, return_attentions=True)
    wins = m.current_windows()
    assert len(out.attentions) == 2
    t = torch.arange(64)
    for layer, att in enumerate(out.attentions):
        assert att.shape == (2, 12, 64, 64)
        assert torch.allclose(att.sum(-1), torch.ones(2, 12, 64), atol=1e-5)
        for h in range(12):
            allowed = (t[:, None] >= t[None, :]) & (t[:, None] - t[None, :] < wins[layer, h])
            assert torch.all(att[:, h][:, ~allowed] == 0)
    same = m(x)  # the backend path and the dense path agree
    assert torch.allclose(out.logits, same.logits, atol=1e-4)


def test_warmup_executes_full_windows_and_then_routing_is_applied():
    m = make()
    seen = {}
    train(m, 6, on_step=lambda s, o: seen.__setitem__(s, m.current_windows().clone()))
    for s in range(3):
        assert torch.all(seen[s] == 64)
    events = []
    m.subscribe(events.append)
    m.prepare_step(6)
    m(batches(1)[0][:, :-1])
    assert all(e.applied and not e.in_warmup for e in events)


def test_cached_decisions_between_updates():
    m = make()
    events: list[RoutingEvent] = []
    m.subscribe(events.append)
    train(m, 14)
    layer0 = [e for e in events if e.layer == 0]
    updates = [e.step for e in layer0 if e.path_mode == "grouped_control_update"]
    assert updates == [3, 8, 13]
    for e in layer0:
        if e.step in (4, 5, 6, 7):
            assert e.path_mode == "grouped_control_cached" and not e.updated and e.tree is None
            assert torch.equal(e.window_idx, next(u for u in layer0 if u.step == 3).window_idx)


def test_every_head_in_exactly_one_group_per_level_and_child_le_parent():
    m = make(control_interval=1)
    events = []
    m.subscribe(events.append)
    train(m, 12)
    checked = 0
    for e in events:
        if not e.tree:
            continue
        for lvl in e.tree:
            heads = sorted(h for g in lvl.members for h in g)
            assert heads == list(range(12))
            if lvl.parent is not None:
                above = e.tree[lvl.level + 1]
                for i, p in enumerate(lvl.parent):
                    assert i in above.groups[p]
                    assert int(lvl.final_idx[i]) <= int(above.final_idx[p])
                    assert int(lvl.final_idx[i]) == min(int(lvl.raw_idx[i]), int(above.final_idx[p]))
        if e.applied:  # executed per-head index = its level-0 group's final index (EMA 0.15 never moves it)
            head_final = torch.empty(12, dtype=torch.long)
            for gi, members in enumerate(e.tree[0].members):
                head_final[members] = e.tree[0].final_idx[gi]
            assert torch.equal(e.window_idx.cpu(), head_final)
        checked += 1
    assert checked >= 12


def test_no_subscriber_no_event_and_handles_detach():
    m = make()
    assert not any(a.has_subscribers for a in m.attention_layers())
    m.prepare_step(0)
    m(batches(1)[0][:, :-1])  # step 0 clusters level 0, but nobody listens: no tree is built
    assert all(a.last_decision.updated and a.last_decision.tree is None for a in m.aah_layers())
    m.reset_routing_state()
    events = []
    h = m.subscribe(events.append)
    x = batches(1)[0][:, :-1]
    m.prepare_step(0)
    m(x)
    assert len(events) == 2 and all(isinstance(e, RoutingEvent) for e in events)
    assert events[0].tree is not None and events[0].head_features is not None  # step 0 clusters level 0
    h.remove()
    m(x)
    assert len(events) == 2
    with m.aah_layers()[1].subscribe(events.append):
        m(x)
    assert len(events) == 3 and events[-1].layer == 1


def test_event_windows_are_tensors_matching_current_windows():
    m = make(control_interval=1)
    events = []
    m.subscribe(events.append)
    train(m, 5)
    last = [e for e in events if e.step == 4]
    for e in last:
        assert e.windows.dtype == torch.long and e.window_idx.dtype == torch.long
        assert torch.equal(e.windows, m.current_windows()[e.layer])
        assert e.raw_head_idx is not None and e.seq_len == 64 and e.candidate_windows == (8, 16, 32, 64)


def _snapshot(model):
    out = []
    for a in model.aah_layers():
        out.append({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in a.state.to_plain().items()})
    return out


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_eval_forward_leaves_routing_unchanged_unless_asked():
    m = make()
    train(m, 9)
    before = _snapshot(m)
    wins = m.current_windows()
    m.eval()
    for step in (9, 10, 13):  # 13 would be a control update in training
        m.set_step(step)
        m(batches(1, seed=5)[0][:, :-1])
    assert all(_same(a, b) for a, b in zip(before, _snapshot(m)))
    assert torch.equal(m.current_windows(), wins)
    with m.routing_mode("mutate"):
        m.set_step(13)
        m(batches(1, seed=5)[0][:, :-1])
    after = _snapshot(m)
    assert not all(_same(a, b) for a, b in zip(before, after))  # reference behaviour (§15.11)
    assert all(not a.eval_mutates_routing for a in m.aah_layers())  # the context restored the mode
    assert make(eval_mutates_routing=True).aah_layers()[0].eval_mutates_routing


def test_checkpoint_round_trip_reproduces_windows():
    for regime in ("full_adaptive", "shallow_freeze", "deep_practical_reuse"):
        m = make(regime)
        train(m, 11)
        buf = io.BytesIO()
        torch.save(m.state_dict(), buf)
        buf.seek(0)
        sd = torch.load(buf, weights_only=True)
        m2 = make(regime, seed=123)
        m2.load_state_dict(sd)
        x = batches(1, seed=9)[0][:, :-1]
        for model in (m, m2):
            model.train()
            model.prepare_step(13)  # a control update: exercises EMA, cached labels, topology, stats
            model(x)
        assert torch.equal(m.current_windows(), m2.current_windows()), regime
        for model in (m, m2):
            model.eval()
            model(batches(1, seed=10)[0][:, :-1])
        assert torch.equal(m.current_windows(), m2.current_windows()), regime
        for a, b in zip(m.aah_layers(), m2.aah_layers()):
            assert a.state.cached_labels == b.state.cached_labels and a.state.topology == b.state.topology
            assert torch.equal(a.state.ema, b.state.ema)


def test_reference_mode_does_not_persist_routing_state():
    m = make(persist_routing_state=False)
    train(m, 4)
    extra = [k for k in m.state_dict() if k.endswith("_extra_state")]
    assert extra and all(m.state_dict()[k] == {} for k in extra)


def test_no_gradient_reaches_the_routing_networks_by_default():
    m = make(control_interval=1)
    init = [p.detach().clone() for p in m.controller_parameters()]
    assert len(init) == 2 * (4 + 4)  # controller (2 linears) + joint scorer (2 linears), per layer
    grads = []

    def check(step, out):
        grads.append(all(p.grad is None for p in m.controller_parameters()))

    train(m, 8, on_step=check)
    assert all(grads)
    assert all(torch.equal(a, b) for a, b in zip(init, m.controller_parameters()))
    assert float(m.controller_grad_norm()) == 0.0 and m.controller_weight_drift()["l2"] == 0.0
    assert any(p.grad is not None for p in m.backbone_parameters())


@pytest.mark.parametrize("mode", ["straight_through", "soft_mixture"])
def test_trainable_controller_options_get_gradients(mode):
    m = make(controller_training=mode)
    norms = []
    train(m, 8, on_step=lambda s, o: norms.append(float(m.controller_grad_norm())))
    assert all(n == 0.0 for n in norms[:3])  # warm-up: full attention, nothing to learn
    assert all(n > 0.0 for n in norms[3:])  # cached steps too: scores are recomputed each forward
    assert m.controller_weight_drift()["l2"] > 0.0


def test_straight_through_forward_equals_the_hard_forward():
    losses = {}
    for mode in ("none", "straight_through"):
        m = make(controller_training=mode)
        seen = []
        train(m, 6, lr=0.0, on_step=lambda s, o: seen.append(float(o.loss.detach())))
        losses[mode] = seen
    assert losses["none"] == pytest.approx(losses["straight_through"], rel=1e-5)


def test_set_control_false_clears_caches_and_true_only_sets_the_flag():
    m = make()
    train(m, 5)
    a = m.aah_layers()[0]
    ema, stats = a.state.ema.clone(), a.state.prev_stats.clone()
    assert a.state.cached_idx is not None and a.state.last_control_step == 3
    a.set_control(True)
    assert a.state.cached_idx is not None
    a.set_control(False)
    s = a.state
    assert s.cached_idx is None and s.cached_labels is None and s.last_control_step is None and s.res_ema is None
    assert torch.equal(s.ema, ema) and torch.equal(s.prev_stats, stats) and s.control_enabled is False


def test_standalone_inference_updates_every_forward():
    m = make()
    m.set_step(None)
    m.routing_mode("mutate")
    m.eval()
    events = []
    m.subscribe(events.append)
    for x in batches(3, seed=2):
        m(x[:, :-1])
    assert [e.path_mode for e in events if e.layer == 0] == ["grouped_control_update"] * 3


def test_fresh_model_eval_decides_without_storing():
    m = make()
    m.eval()
    m.set_step(None)
    m(batches(1)[0][:, :-1])
    assert all(a.state.ema is None and a.state.cached_idx is None for a in m.aah_layers())


def test_full_attention_acr_is_one_and_plain_layers():
    m = make("full_attention")
    assert m.aah_layers() == [] and m.controller_parameters() == []
    train(m, 2)
    assert acr(m.current_windows().numpy(), 64) == 1.0


def test_aah_layer_type():
    assert all(isinstance(a, AAHAttention) for a in make().aah_layers())


def test_group_ratios_reference_quirk_and_fix():
    for fix in (False, True):
        m = make(control_interval=1, fix_group_ratios=fix)
        events = []
        m.subscribe(events.append)
        train(m, 6)
        e = [e for e in events if e.step == 5][0]
        w = [min(64, max(4, int(x))) for x in e.windows.tolist()]
        idx = e.window_idx.tolist()
        for members, ratio in zip(e.tree[0].members, e.group_ratios):
            picked = [w[h] for h in members] if fix else [w[idx[h]] for h in members]
            assert ratio == pytest.approx(sum(picked) / (len(picked) * 64))


def test_bench_routing_rows(capsys):
    import json
    import statistics

    from aah_viz.cli import main

    args = ["bench", "routing", "--json", "--heads", "8,16", "--seq-len", "128", "--pairs", "3"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["heads"] for r in data["rows"]] == [8, 16] and data["clock"] == "cpu"
    for r in data["rows"]:
        assert r["seq_len"] == 128
        assert r["routing_update_ms"] > 0 and r["attention_forward_ms"] > 0
        times = data["raw_s"][f"routing_vs_attention_h{r['heads']}"]["cpu"]
        per_pair = [a / b for a, b in zip(times["routing_update"], times["attention_forward"])]
        assert len(per_pair) == 3 and r["ratio"]["n_pairs"] == 3
        assert r["ratio"]["median"] == pytest.approx(statistics.median(per_pair), abs=1e-4)
        assert r["ratio"]["ci95"][0] <= r["ratio"]["median"] <= r["ratio"]["ci95"][1]


def test_bench_routing_times_the_strided_option_in_the_same_rounds(capsys):
    import json
    import statistics

    from aah_viz.cli import main

    args = ["bench", "routing", "--heads", "8", "--seq-len", "64", "--pairs", "3", "--feature-token-stride", "4"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["feature_token_stride"] == 4
    (row,) = data["rows"]
    exact = data["raw_s"]["routing_vs_attention_h8"]["cpu"]
    strided = data["raw_s"]["strided_routing_vs_attention_h8"]["cpu"]
    assert strided["attention_forward"] == exact["attention_forward"]  # one forward per round serves both
    per_pair = [a / b for a, b in zip(strided["routing_update_strided"], strided["attention_forward"])]
    assert row["strided"]["feature_token_stride"] == 4 and row["strided"]["ratio"]["n_pairs"] == 3
    assert row["strided"]["ratio"]["median"] == pytest.approx(statistics.median(per_pair), abs=1e-4)
    assert row["strided"]["routing_update_ms"] == pytest.approx(
        statistics.median(strided["routing_update_strided"]) * 1e3, abs=1e-3
    )
    with pytest.raises(SystemExit) as refused:  # argparse's one line: every bench count is checked there
        main(args[:-1] + ["0"])
    assert refused.value.code == 2
    assert "argument --feature-token-stride: expects a whole number from 1" in capsys.readouterr().err
