"""Every option of the config runs end to end on a tiny model, and the RNG bookkeeping holds."""

import pytest
import torch

from instrumentation import AAHConfig, AAHTransformer

torch.set_num_threads(1)


def run(steps=5, **kw):
    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", warmup_steps=1, control_interval=1, **kw)
    model = AAHTransformer(cfg)
    events = []
    model.subscribe(lambda e: events.append(e) if e.layer == 0 else None)
    g = torch.Generator().manual_seed(0)
    for step in range(steps):
        model.prepare_step(step)
        x = torch.randint(0, 256, (2, 64), generator=g)
        out = model(x, targets=x)
        out.loss.backward()
    assert torch.isfinite(out.loss)
    return model, events


@pytest.mark.parametrize(
    "mode,arch",
    [
        ("base", "mlp"),
        ("enriched", "deep_mlp"),
        ("contrastive", "mlp"),
        ("position_aware", "mlp"),
        ("relative_sibling_mean", "deep_mlp"),
    ],
)
def test_input_modes_and_archs(mode, arch):
    _, events = run(controller_input_mode=mode, controller_arch=arch)
    assert events[-1].tree is not None and events[-1].applied


@pytest.mark.parametrize("pairwise", ["none", "sibling_bias", "joint_sibling"])
def test_pairwise_modes(pairwise):
    model, events = run(controller_pairwise_mode=pairwise)
    top = events[-1].tree[-1]
    if pairwise == "none":
        assert torch.equal(top.logits, top.base_logits)
    else:
        assert not torch.equal(top.logits, top.base_logits) or len(top.groups) == 1


@pytest.mark.parametrize(
    "mode", ["adaptive", "freeze_learned_topology", "freeze_after_warmup", "fixed_random", "fixed_deterministic"]
)
def test_hierarchy_modes(mode):
    _, events = run(hierarchy_ablation_mode=mode)
    if mode == "fixed_deterministic":
        assert sorted(sorted(g) for g in events[-1].tree[0].members) == [list(range(0, 12, 2)), list(range(1, 12, 2))]


@pytest.mark.parametrize(
    "metric,gfm",
    [
        ("cosine", "mean_std"),
        ("centered_cosine", "mean_var"),
        ("cosine_normdiff", "mean_global_offset"),
        ("l2", "mean"),
    ],
)
def test_upper_metrics_and_group_feature_modes(metric, gfm):
    run(upper_cluster_metric=metric, group_feature_mode=gfm, upper_l2_threshold=-0.9)  # -1 could self-merge


def test_oracle_alternating_overrides_the_choice():
    _, events = run(controller_choice_mode="oracle_alternating", parent_constraint=False)
    raw = events[-1].tree[0].raw_idx
    assert raw.tolist() == [1 + (i % 2) for i in range(len(raw))]


def test_ramp_blends_after_warmup():
    model, events = run(steps=4, post_warmup_ramp_steps=4, window_ablation_mode="fixed_window", fixed_window=8)
    # fixed_window is applied after the ramp, so every head runs 8 tokens whatever the ramp did
    assert all(torch.all(e.windows == 8) for e in events)
    _, events = run(steps=3, post_warmup_ramp_steps=100)
    e = events[-1]  # progress = (2 - 1 + 1) / 100: still almost the full window
    assert torch.all(e.window_idx == 3)


def test_controller_float32_runs():
    run(controller_float32=True)


def test_bf16_autocast_forward():
    torch.manual_seed(0)
    model = AAHTransformer(AAHConfig.from_preset("tiny", warmup_steps=0, control_interval=1))
    x = torch.randint(0, 256, (2, 64))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for step in range(2):
            model.prepare_step(step)
            out = model(x, targets=x)
    assert torch.isfinite(out.loss.float())


def test_shorter_evaluation_length_falls_back_to_index_zero_in_warmup():
    torch.manual_seed(0)
    model = AAHTransformer(AAHConfig.from_preset("tiny"))
    model.prepare_step(0)
    model(torch.randint(0, 256, (1, 48)))  # T = 48 is not a candidate: warm-up uses index 0 (§15.13)
    assert torch.all(model.current_windows() == 8)


def test_backbones_are_identical_across_controller_variants():
    def backbone(**kw):
        torch.manual_seed(0)
        m = AAHTransformer(AAHConfig.from_preset("tiny", **kw))
        return [p.detach().clone() for p in m.backbone_parameters()]

    ref = backbone(controller_input_mode="base", controller_pairwise_mode="none")
    for kw in (
        dict(),
        dict(regime="grouping_off"),
        dict(controller_arch="deep_mlp", control_dim=32),
        dict(controller_pairwise_mode="sibling_bias"),
    ):
        other = backbone(**kw)
        assert len(other) == len(ref) and all(torch.equal(a, b) for a, b in zip(ref, other))


def _first_update(stride, q, k, v, prev, **kw):
    """The routing decision of one update (step None: every forward is one) over the given Q/K/V."""
    from instrumentation.routing.step import RoutingInputs, initial_state, networks_for, route_step

    torch.manual_seed(0)
    cfg = AAHConfig.from_preset("tiny", feature_token_stride=stride, **kw)
    state = initial_state(cfg).with_stats(prev)
    _, decision = route_step(state, RoutingInputs(q, k, v, step=None, want_tree=True), cfg, networks_for(cfg))
    return decision


def _qkv_and_stats(T=64):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, T, 12, 8, generator=g).transpose(1, 2) for _ in range(3))  # the model's layout
    return q, k, v, torch.rand(12, 3, generator=g)


@pytest.mark.parametrize(
    "kw", [dict(), dict(regime="grouping_off"), dict(hierarchy_ablation_mode="fixed_deterministic")]
)
def test_feature_token_stride_reads_every_sth_token_for_head_and_group_moments(kw):
    """With stride s, the head features and every level's group features are those the exact method
    computes from the tokens 0, s, 2s, ...; with stride 1 they are the exact method's own."""
    q, k, v, prev = _qkv_and_stats()
    strided = _first_update(4, q, k, v, prev, **kw)
    on_kept_tokens = _first_update(1, *(x[:, :, ::4] for x in (q, k, v)), prev, **kw)
    exact = _first_update(1, q, k, v, prev, **kw)

    def features(d):  # clustered head features (none with a fixed partition), then each level's rows
        return ([] if d.head_features is None else [d.head_features]) + [lvl.features for lvl in d.tree]

    assert [lvl.groups for lvl in strided.tree] == [lvl.groups for lvl in on_kept_tokens.tree]
    assert len(features(strided)) == len(features(on_kept_tokens)) > 0
    assert all(torch.equal(a, b) for a, b in zip(features(strided), features(on_kept_tokens)))
    assert not torch.equal(features(strided)[0], features(exact)[0])


def test_feature_token_stride_must_be_positive():
    from aah_viz.errors import ConfigError

    with pytest.raises(ConfigError, match="feature_token_stride"):
        AAHConfig.from_preset("tiny", feature_token_stride=0)


def test_feature_token_stride_trains_a_tiny_model():
    model, events = run(steps=4, feature_token_stride=3)
    updates = [e for e in events if e.updated and e.head_features is not None]
    assert updates and all(torch.isfinite(e.head_features).all() for e in updates)


def test_zscore_features_are_standardised_per_feature_across_heads():
    """normalize_features against the textbook z-score in numpy; a constant feature becomes 0."""
    import numpy as np

    from instrumentation.routing.features import normalize_features

    g = torch.Generator().manual_seed(3)
    x = torch.rand(12, 9, generator=g) + 0.5
    x[:, 7] = 0.25  # a feature every head shares (e.g. the zero previous-forward columns)
    assert normalize_features(x, "none") is x
    z = normalize_features(x, "zscore").numpy()
    a = x.numpy().astype(np.float64)
    std = a.std(axis=0)
    std[7] = 1.0  # constant: centred to exactly 0
    expected = (a - a.mean(axis=0)) / std
    assert np.allclose(z, expected, atol=1e-5)
    with pytest.raises(ValueError, match="feature_normalization"):
        normalize_features(x, "l2")


def test_zscore_option_clusters_the_standardised_features_and_the_default_does_not():
    """The first update (EMA = the raw features) clusters zscore(features) under the option; the
    level-0 groups are the clustering routine's on exactly those rows."""
    from instrumentation.routing.clustering import cluster
    from instrumentation.routing.features import normalize_features

    q, k, v, prev = _qkv_and_stats()
    raw = _first_update(1, q, k, v, prev)
    z = _first_update(1, q, k, v, prev, feature_normalization="zscore")
    assert torch.equal(z.head_features, normalize_features(raw.head_features, "zscore"))
    expected = cluster(
        z.head_features, threshold=0.72, allow_forced_bipartition=True, min_group_size=3, churn_penalty=0.02
    )
    assert z.tree[0].groups == expected.groups
    assert raw.head_features.min() > 0  # the paper's features: raw magnitudes


def test_feature_normalization_is_validated_by_name():
    from aah_viz.errors import ConfigError

    with pytest.raises(ConfigError, match="feature_normalization.*none, zscore"):
        AAHConfig.from_preset("tiny", feature_normalization="minmax")
    assert AAHConfig.from_preset("tiny").feature_normalization == "none"


def test_feature_normalization_trains_a_tiny_model():
    _, events = run(steps=4, feature_normalization="zscore")
    updates = [e for e in events if e.updated and e.head_features is not None]
    assert updates
    for e in updates:  # what was clustered: every feature centred across the heads
        assert torch.allclose(e.head_features.mean(dim=0), torch.zeros(9), atol=1e-5)
