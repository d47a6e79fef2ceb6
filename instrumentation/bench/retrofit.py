"""A patched Hugging Face model against the same model unpatched (``aah-viz bench retrofit``).

A random Qwen3 (4 layers, 8 query heads over 4 key/value heads, head dim 64 by default) is
built from one seed for every variant, or every variant loads the same Hugging Face folder
(``model_dir``: a real model's own shape, vocabulary and weights; token ids drawn from its
vocabulary). Each pair times forward + backward of the loss on one batch for a patched variant
and for the unpatched model, interleaved (``aah_viz.paired_timing``), and reports the median of
the per-pair ratios with a bootstrap interval. Candidate windows are the paper's ratios scaled to
T (T/8, T/4, T/2, T); the patched model runs regime ``full_adaptive`` with the banded backend.

- ``paper_mix_vs_unpatched``: every layer executes the paper's Full-adaptive window mix (10 x T/8,
  2 x T/4, 2 x T/2, 2 x T per 16 heads, ``bench attention``'s ``paper_mix``), routing frozen as set;
- ``live_routing_vs_unpatched``: routing live in training mode (a control update every
  ``control_interval`` steps, as in adaptation), the windows it chose are reported;
- ``full_attention_patch_vs_unpatched``: the patch in regime ``full_attention`` (what the patch
  itself costs when every head attends fully);
- ``soft_mixture_step_vs_unpatched``: the step ``aah-viz retrofit`` trains with by default: routing
  live in training mode, ``controller_training="soft_mixture"`` (every layer runs all K candidate
  windows and mixes them), gradients for the AAH parameters only (``--train aah``), against the
  unpatched model's forward + backward with gradients for all its parameters;
- ``paper_mix_forward_vs_unpatched`` and ``full_attention_patch_forward_vs_unpatched``: the forward
  pass alone (no gradients, as in evaluation and prefill) of the paper mix and of the
  full-attention patch against the unpatched model's forward.

With ``sink_tokens`` k every routed variant keeps the first k positions visible to every query
(``sink_tokens``, method §10.4); the paper mix's causal coverage then counts the sink pairs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aah_viz.errors import ConfigError
from aah_viz.paired_timing import interleave, paired_report, timed
from instrumentation.backends import causal_coverage
from instrumentation.bench.attention import paper_mix
from instrumentation.bench.models import random_causal_lm
from instrumentation.config import windows_for

FORWARD_ONLY = ("paper_mix", "full_attention_patch")  # also timed forward alone (evaluation, prefill)


def execute_windows(handle, per_head: list[int]) -> None:
    """Make every AAH layer of ``handle`` execute ``per_head`` windows (frozen evaluation keeps them)."""
    cands = list(handle.cfg.windows)
    idx = torch.tensor([cands.index(w) for w in per_head], dtype=torch.long)
    for layer in handle.aah_layers():
        layer.state = layer.state.replace(executed_idx=idx.clone())


def bench_retrofit(
    *,
    seq_len: int = 1024,
    n_layer: int = 4,
    n_head: int = 8,
    n_kv: int = 4,
    head_dim: int = 64,
    vocab: int = 1024,
    batch: int = 1,
    windows=None,
    backend: str = "banded",
    pairs: int = 9,
    clock: str = "cpu",
    device: str = "cpu",
    seed: int = 0,
    model_dir=None,
    progress=None,
    sink_tokens: int = 0,
) -> dict:
    """Paired ratios of forward+backward times (and of forward alone for ``FORWARD_ONLY``), patched /
    unpatched, and what the patched model executed (with ``sink_tokens`` k: the routed variants keep
    the first k positions)."""
    from instrumentation.retrofit import patch_model

    if windows is None:
        windows = windows_for(seq_len)
    windows = tuple(int(w) for w in windows)
    if seq_len < 2 or max(windows) > seq_len:
        raise ConfigError(f"bench retrofit: windows must lie in 1..{seq_len} and --seq-len be >= 2")
    if sink_tokens < 0:
        raise ConfigError(f"bench retrofit: --sink-tokens must be >= 0, got {sink_tokens}")
    sinks = {"sink_tokens": int(sink_tokens)} if sink_tokens else {}
    variants = ("unpatched", "paper_mix", "live_routing", "full_attention_patch", "soft_mixture_step")
    live = ("live_routing", "soft_mixture_step")
    if model_dir is not None:
        from instrumentation.retrofit.load import load_causal_lm

        def build():
            model = load_causal_lm(model_dir, device)
            model.config._attn_implementation = "sdpa"  # the unpatched model's fastest exact path
            return model
    else:

        def build():
            return random_causal_lm("qwen3", seed, n_layer, n_head, n_kv, head_dim, vocab, max(seq_len, 128)).to(device)

    models = {name: build() for name in variants}
    shape = models["unpatched"].config
    n_layer, n_head = shape.num_hidden_layers, shape.num_attention_heads
    n_kv = getattr(shape, "num_key_value_heads", None) or n_head
    head_dim = getattr(shape, "head_dim", None) or shape.hidden_size // n_head
    vocab = shape.vocab_size
    handles = {
        "paper_mix": patch_model(models["paper_mix"], "full_adaptive", windows, attention_backend=backend, **sinks),
        "live_routing": patch_model(
            models["live_routing"], "full_adaptive", windows, attention_backend=backend, **sinks
        ),
        "full_attention_patch": patch_model(models["full_attention_patch"], "full_attention", windows),
        "soft_mixture_step": patch_model(
            models["soft_mixture_step"],
            "full_adaptive",
            windows,
            attention_backend=backend,
            controller_training="soft_mixture",
            **sinks,
        ),
    }
    handles["soft_mixture_step"].train_parameters("aah")  # aah-viz retrofit's default --train
    mix = paper_mix(seq_len, n_head)
    execute_windows(handles["paper_mix"], mix)
    for name, model in models.items():
        model.train(name in live)  # eval forwards keep the frozen mix; dropout is 0 in all of them
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (batch, seq_len + 1), generator=gen).to(device)
    x, y = ids[:, :-1], ids[:, 1:]
    steps = {name: 0 for name in models}

    def step(name):
        def run():
            model = models[name]
            if name in live:
                handles[name].prepare_step(steps[name])
            steps[name] += 1
            logits = model(input_ids=x, use_cache=False).logits
            F.cross_entropy(logits.reshape(-1, vocab).float(), y.reshape(-1)).backward()
            model.zero_grad(set_to_none=True)

        return run

    def forward(name):
        model = models[name]

        def run():
            with torch.no_grad():
                model(input_ids=x, use_cache=False)

        return run

    sync = torch.cuda.synchronize if str(device).startswith("cuda") else None
    side = {name: timed(step(name), sync=sync) for name in models}
    side |= {f"{name}_forward": timed(forward(name), sync=sync) for name in ("unpatched", *FORWARD_ONLY)}
    sides = {f"{n}_vs_unpatched": (n, "unpatched") for n in variants[1:]}
    sides |= {f"{n}_forward_vs_unpatched": (f"{n}_forward", "unpatched_forward") for n in FORWARD_ONLY}
    comparisons = {key: (side[a], side[b]) for key, (a, b) in sides.items()}
    raw = interleave(comparisons, pairs=pairs, progress=progress)
    doc = paired_report(raw, sides=sides, clock=clock)
    step("paper_mix")()
    assert handles["paper_mix"].current_windows().tolist() == [mix] * n_layer  # the mix stayed as set
    seen = []
    with handles["live_routing"].subscribe(lambda ev: seen.append((ev.backend, ev.realised_work))):
        step("live_routing")()
    mixed = []
    with handles["soft_mixture_step"].subscribe(lambda ev: mixed.append(ev.backend)):
        step("soft_mixture_step")()
    executed = handles["live_routing"].current_windows().tolist()
    flat = [w for row in executed for w in row]
    works = [float(w) for _, w in seen if w is not None]
    doc["config"] = dict(
        model=str(model_dir) if model_dir is not None else "random Qwen3",
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        n_kv_head=n_kv,
        head_dim=head_dim,
        batch=batch,
        candidate_windows=list(windows),
        attention_backend=backend,
        sink_tokens=int(sink_tokens),
        pairs=pairs,
        device=str(device),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
    )
    doc["paper_mix"] = mix
    doc["paper_mix_causal_coverage"] = causal_coverage(mix, seq_len, sink_tokens)
    doc["live_routing_windows"] = executed
    doc["live_routing_window_share"] = {str(w): flat.count(w) / len(flat) for w in windows}
    doc["live_routing_causal_coverage"] = causal_coverage(flat, seq_len, sink_tokens)
    doc["backends_seen"] = sorted({b for b, _ in seen if b})
    doc["soft_mixture_backends_seen"] = sorted({b for b in mixed if b})
    doc["realised_work_mean"] = sum(works) / len(works) if works else None
    return doc
