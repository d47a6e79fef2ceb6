"""Controller inputs (method §6), networks and pairing (§7), RNG bookkeeping (§7.4)."""

import torch

from instrumentation.routing.controller import (
    INPUT_DIMS,
    level_inputs,
    make_networks,
    score_level,
    sibling_difference,
    sibling_pairs,
    single_level_inputs,
)


def _nets(mode="enriched", pairwise="joint_sibling", **kw):
    args = dict(
        input_mode=mode,
        n_windows=4,
        control_dim=16,
        arch="mlp",
        logit_scale=1.0,
        pairwise_mode=pairwise,
        joint_hidden_dim=64,
        joint_output_scale=1.0,
        pairwise_bias_scale=1.0,
        rng_reference_dim=16,
    )
    args.update(kw)
    return make_networks(**args)


def test_parameter_counts_of_the_paper_networks():
    nets = _nets()
    assert sum(p.numel() for p in nets.controller.parameters()) == 548
    assert sum(p.numel() for p in nets.joint.parameters()) == 8008
    assert nets.sibling_bias is None


def test_input_dims_of_every_mode():
    F = [torch.rand(4, 9), torch.rand(2, 9)]
    sizes = [[3, 3, 4, 2], [2, 2]]
    pmaps = [[0, 0, 1, 1]]
    for mode, dim in INPUT_DIMS.items():
        rows = level_inputs(F, sizes, pmaps, mode)
        assert [r.shape for r in rows] == [torch.Size([4, dim]), torch.Size([2, dim])]
    assert INPUT_DIMS == {
        "base": 9,
        "enriched": 29,
        "contrastive": 38,
        "position_aware": 32,
        "relative_sibling_mean": 28,
    }


def test_enriched_layout():
    F0, F1 = torch.rand(4, 9), torch.rand(2, 9)
    rows = level_inputs([F0, F1], [[3, 3, 4, 2], [2, 2]], [[0, 0, 1, 1]], "enriched")
    x0, x1 = rows
    assert torch.equal(x0[:, :9], F0)
    assert torch.all(x0[:, 9] == 0.0) and torch.all(x1[:, 9] == 1.0)  # level scalar
    assert torch.allclose(x0[:, 10:19], F0 - F1[torch.tensor([0, 0, 1, 1])])  # parent difference
    assert torch.all(x1[:, 10:19] == 0.0)  # none at the top
    assert torch.allclose(x0[:, 19:28], F0 - F0.mean(0))  # global offset
    assert torch.allclose(x0[:, 28], torch.tensor([3, 3, 4, 2]) / 12.0)  # size fraction


def test_sibling_difference_and_position():
    F = torch.tensor([[1.0], [3.0], [5.0], [7.0]])
    top = sibling_difference(F, None)
    assert torch.allclose(top[:, 0], torch.tensor([1 - 5, 3 - 13 / 3, 5 - 11 / 3, 7 - 3.0]))
    lower = sibling_difference(F, [0, 0, 1, 2])
    assert torch.allclose(lower[:, 0], torch.tensor([-2.0, 2.0, 0.0, 0.0]))  # lone children get zero
    rows = level_inputs([torch.rand(3, 9), torch.rand(2, 9)], [[1, 1, 1], [2, 1]], [[0, 0, 1]], "position_aware")
    assert rows[0][:, 29:].tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    single = level_inputs([torch.rand(1, 9)], [[1]], [], "position_aware")[0]
    assert torch.all(single[:, 29:] == 0)


def test_grouping_off_inputs():
    f = torch.rand(12, 9)
    x = single_level_inputs(f, "enriched")
    assert torch.all(x[:, 9] == 0) and torch.all(x[:, 10:19] == 0)
    assert torch.allclose(x[:, 28], torch.full((12,), 1 / 12))


def test_pairing_rules():
    assert sibling_pairs(5, None) == [(0, 1), (2, 3)]
    assert sibling_pairs(6, [1, 0, 1, 0, 0, 1]) == [(1, 3), (0, 2)]  # per parent ascending, children ascending
    assert sibling_pairs(3, [0, 1, 2]) == []  # single children yield no pair


def test_joint_scorer_replaces_paired_rows():
    nets = _nets()
    x = torch.rand(3, 29)
    s = score_level(nets, x, None, "joint_sibling")
    assert s.paired == [True, True, False] and s.pairs == [(0, 1)]
    z = torch.cat([x[0:1], x[1:2], x[0:1] - x[1:2], x[1:2] - x[0:1]], dim=1)
    expected = nets.joint.net(z).reshape(2, 4)
    assert torch.allclose(s.logits[:2], expected)
    assert torch.allclose(s.logits[2], s.base_logits[2])  # unpaired keeps its base logits
    assert torch.allclose(s.base_logits, nets.controller(x))


def test_sibling_bias_adds_and_none_is_independent():
    nets = _nets(pairwise="sibling_bias")
    assert nets.joint is None and nets.sibling_bias is not None
    x = torch.rand(4, 29)
    s = score_level(nets, x, None, "sibling_bias")
    assert torch.allclose(s.logits, s.base_logits + nets.sibling_bias(sibling_difference(x, None)))
    ind = score_level(_nets(pairwise="none"), x, None, "none")
    assert torch.equal(ind.logits, ind.base_logits) and not any(ind.paired)


def test_rng_bookkeeping_keeps_the_global_stream():
    # Any controller variant consumes exactly the draws of the reference-shaped controller.
    after = []
    for kw in (
        dict(mode="base", pairwise="none"),
        dict(mode="enriched"),
        dict(mode="contrastive", arch="deep_mlp"),
        dict(mode="base", pairwise="sibling_bias", control_dim=32),
    ):
        torch.manual_seed(0)
        _nets(kw.pop("mode"), kw.pop("pairwise", "joint_sibling"), **kw)
        after.append(torch.rand(3))
    assert all(torch.equal(after[0], a) for a in after[1:])
