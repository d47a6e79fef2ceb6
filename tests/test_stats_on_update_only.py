"""``stats_on_update_only``: head statistics only on the forwards whose statistics routing reads next.

The same model trained twice on the same batches, with the option off (the faithful default:
statistics on every training forward) and on, must route identically (the same features at every
update, the same executed windows, the same losses); with the option on, the layers' previous-forward
statistics change only on forwards followed by one that reads them.
"""

import pytest

torch = pytest.importorskip("torch")

from instrumentation import AAHConfig, AAHTransformer  # noqa: E402

pytestmark = pytest.mark.torch


def _run(regime: str, backend: str, option: bool, steps: int = 14):
    torch.manual_seed(0)
    cfg = AAHConfig.from_preset(
        "tiny",
        regime=regime,
        attention_backend=backend,
        dropout=0.0,
        warmup_steps=3,
        control_interval=4,
        stats_on_update_only=option,
    )
    model = AAHTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    events, losses, stats_changed = [], [], []
    model.subscribe(events.append)
    layer = model.aah_layers()[0]
    model.train()
    for step in range(steps):
        data = torch.randint(0, cfg.vocab_size, (2, 65), generator=gen)
        before = layer.state.prev_stats
        model.prepare_step(step)
        out = model(data[:, :-1], targets=data[:, 1:])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
        stats_changed.append(layer.state.prev_stats is not before)
    return events, losses, stats_changed


@pytest.mark.parametrize("regime", ["full_adaptive", "grouping_off", "control_off", "freeze_after_warmup"])
@pytest.mark.parametrize("backend", ["dense_masked", "banded"])
def test_routing_is_unchanged_and_statistics_are_computed_only_before_a_reading_forward(regime, backend):
    ref_events, ref_losses, ref_changed = _run(regime, backend, False)
    events, losses, changed = _run(regime, backend, True)
    assert losses == ref_losses
    assert len(events) == len(ref_events)
    reading = []  # steps whose forward read the previous forward's statistics (features computed)
    for a, b in zip(events, ref_events):
        assert (a.step, a.layer, a.path_mode, a.updated) == (b.step, b.layer, b.path_mode, b.updated)
        assert torch.equal(a.window_idx, b.window_idx)
        assert (a.head_features is None) == (b.head_features is None)
        if a.head_features is not None:
            assert torch.equal(a.head_features, b.head_features)
        if a.layer == 0 and a.updated:
            reading.append(a.step)
    assert all(ref_changed)  # the default computes statistics on every training forward
    assert reading, "the run must contain forwards that read the statistics"
    # with the option: statistics exactly on the forwards followed by a reading forward
    assert changed[:-1] == [step + 1 in reading for step in range(len(changed) - 1)]
    if regime != "control_off":  # control off rebuilds its hierarchy, reading statistics, on every forward
        assert not all(changed)
