"""The ``head_windows`` baseline: every head its own static causal band (``static_head_windows``)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from aah_viz.errors import ConfigError  # noqa: E402
from instrumentation.attention import CausalSelfAttention  # noqa: E402
from instrumentation.config import AAHConfig  # noqa: E402
from instrumentation.model import AAHTransformer  # noqa: E402

WINDOWS = (4, 8, 16, 32)
ASSIGNMENT = [[4, 32, 8, 16], [16, 16, 4, 32]]


def _cfg(**kw) -> AAHConfig:
    shape = dict(n_layer=2, n_head=4, n_embd=32, n_ff=64, block_size=32, vocab_size=64, windows=WINDOWS)
    return AAHConfig.from_shape(shape, "test", "head_windows", **{"static_head_windows": ASSIGNMENT, **kw})


def _banded_reference(q, k, v, windows):
    """Per head: softmax over keys j with i - w < j <= i, written out with an explicit mask."""
    B, H, T, D = q.shape
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    out = torch.empty_like(q)
    for h, w in enumerate(windows):
        allowed = (j <= i) & (j > i - w)
        scores = (q[:, h] @ k[:, h].transpose(-1, -2)) / math.sqrt(D)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out[:, h] = torch.softmax(scores, dim=-1) @ v[:, h]
    return out


@pytest.mark.parametrize("need_probs", [False, True])
def test_each_head_attends_within_its_own_band(need_probs):
    cfg = _cfg()
    layer = CausalSelfAttention(cfg, 1, window=tuple(ASSIGNMENT[1]), project=False).eval()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 8, generator=gen) for _ in range(3))
    y, probs = layer.attend(q, k, v, need_probs=need_probs)
    torch.testing.assert_close(y, _banded_reference(q, k, v, ASSIGNMENT[1]), rtol=1e-5, atol=1e-6)
    if need_probs:
        far = torch.arange(32)[:, None] - torch.arange(32)[None, :]
        for h, w in enumerate(ASSIGNMENT[1]):
            assert float(probs[:, h][:, far >= w].abs().sum()) == 0.0


def test_the_model_executes_and_reports_the_assignment():
    cfg = _cfg()
    model = AAHTransformer(cfg).eval()
    seen = {}
    with model.subscribe(lambda ev: seen.__setitem__(ev.layer, ev)), torch.no_grad():
        model(torch.randint(0, 64, (1, 32)))
    for layer, windows in enumerate(ASSIGNMENT):
        assert seen[layer].windows.tolist() == windows
        assert seen[layer].window_idx.tolist() == [WINDOWS.index(w) for w in windows]
        assert seen[layer].candidate_windows == WINDOWS
    assert model.current_windows().tolist() == ASSIGNMENT


def test_a_config_with_head_windows_round_trips_through_its_dict():
    cfg = _cfg()
    again = AAHConfig.from_dict(cfg.to_dict())
    assert again.static_head_windows == tuple(tuple(r) for r in ASSIGNMENT) and again == cfg


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(static_head_windows=[]), "needs one window per head"),
        (dict(static_head_windows=[[4, 8, 16, 32]]), "needs 2 layers x 4 heads"),
        (dict(static_head_windows=[[4, 8, 16, 64], [4, 4, 4, 4]]), "outside 1..block_size=32"),
        (dict(static_head_windows=[[4, 8, 16, "x"], [4, 4, 4, 4]]), "one list of integer windows per layer"),
    ],
)
def test_bad_assignments_are_refused_by_name(kw, fragment):
    with pytest.raises(ConfigError, match="static_head_windows") as err:
        _cfg(**kw)
    assert fragment in str(err.value)
