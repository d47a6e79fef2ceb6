"""Cached generation of a patched model with ``WindowedKVCache`` against the unpatched model with its
own cache (``aah-viz bench generate``): key/value-cache bytes and decode tokens per second.

The model is a Hugging Face folder (``model_dir``) or, by default, a random Llama built from one seed
(4 layers, 8 query heads over 4 key/value heads, head dim 64; no download). The patched copy runs
regime ``full_adaptive`` (banded backend) with candidate windows T/8, T/4, T/2, T for the prompt length
T, every layer executing the paper's Full-adaptive mix (``bench attention``'s ``paper_mix``), routing
frozen as set. Each side prefills one prompt of random tokens (untimed, ``timed``'s setup) and then
runs ``new_tokens - 1`` greedy decode steps (timed), in interleaved pairs (``aah_viz.paired_timing``).

- ``ratios.decode_tokens_per_s_windowed_vs_unpatched``: the median per-pair ratio of decode tokens/s
  (above 1: the windowed side decodes faster), with its bootstrap interval;
- ``kv_cache``: the bytes each cache holds after the last decode step, their ratio, and what the windows
  predict: ``window_share`` (mean over query heads of min(W, L) / L, L the positions seen: before
  grouped-query sharing) and ``kv_head_share`` (the same over key/value heads, each keeping the largest
  window of the query heads it serves: what ``WindowedKVCache`` stores).

With ``sink_tokens`` k the patched model keeps the first k positions visible to every query and
``WindowedKVCache`` keeps them for every windowed head: the shares count them, and
``kv_head_share_without_sinks`` gives the same windows' share without them, for comparison.
"""

from __future__ import annotations

import statistics

import torch

from aah_viz.errors import ConfigError
from aah_viz.paired_timing import DEFAULT_PAIRS, by_clock, interleave, paired_report, timed
from instrumentation.bench.attention import paper_mix
from instrumentation.bench.models import random_causal_lm
from instrumentation.bench.retrofit import execute_windows
from instrumentation.config import windows_for

RATIO = "decode_tokens_per_s_windowed_vs_unpatched"


def _shape(model) -> dict:
    c = model.config
    head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
    return dict(
        n_layer=int(c.num_hidden_layers),
        n_head=int(c.num_attention_heads),
        n_kv_head=int(c.num_key_value_heads),
        head_dim=head_dim,
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
    )


def kept_positions(window: int, seen: int, sinks: int = 0) -> int:
    """Positions a head with ``window`` keeps after ``seen``: the first ``sinks`` and the last ``window`` after them."""
    first = min(int(sinks), seen)
    return first + min(int(window), seen - first)


def window_shares(per_head: list[int], n_kv: int, seen: int, sinks: int = 0) -> dict:
    """What the windows predict for the cache held after ``seen`` positions: the mean over query heads
    of what each keeps (min(W, seen), plus the first ``sinks`` positions) / seen, and the same over
    key/value heads keeping their group's largest window."""
    from instrumentation.retrofit.kv_cache import kv_reach

    reach = kv_reach(per_head, n_kv)
    return dict(
        window_share=sum(kept_positions(w, seen, sinks) for w in per_head) / (len(per_head) * seen),
        kv_head_share=sum(kept_positions(r, seen, sinks) for r in reach) / (len(reach) * seen),
        kv_head_windows=reach,
    )


class _Decoder:
    """One side: prefill a prompt into a fresh cache (setup), then greedy decode steps (timed)."""

    def __init__(self, model, make_cache, ids: torch.Tensor, steps: int):
        self.model, self.make_cache, self.ids, self.steps = model, make_cache, ids, steps
        self.cache, self.token = None, None

    @torch.no_grad()
    def prefill(self) -> None:
        self.cache = self.make_cache()
        out = self.model(input_ids=self.ids, cache=self.cache, use_cache=True)
        self.token = out.logits[:, -1].argmax(-1, keepdim=True)

    @torch.no_grad()
    def decode(self) -> None:
        token = self.token
        for _ in range(self.steps):
            out = self.model(input_ids=token, cache=self.cache, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)


def bench_generate(
    *,
    model_dir=None,
    prompt_len: int = 1024,
    new_tokens: int = 64,
    batch: int = 1,
    n_layer: int = 4,
    n_head: int = 8,
    n_kv: int = 4,
    head_dim: int = 64,
    vocab: int = 1024,
    pairs: int = DEFAULT_PAIRS,
    clock: str = "cpu",
    device: str = "cpu",
    seed: int = 0,
    progress=None,
    sink_tokens: int = 0,
) -> dict:
    """Paired decode tokens/s and the cache bytes of ``WindowedKVCache`` (patched) against the unpatched cache;
    with ``sink_tokens`` k the patched model and its cache keep the first k positions."""
    from transformers import DynamicCache

    from instrumentation.retrofit import WindowedKVCache, cache_bytes, patch_model
    from instrumentation.retrofit.load import load_causal_lm

    if prompt_len < 2 or new_tokens < 2:
        raise ConfigError("bench generate: --prompt-len and --new-tokens must be >= 2")
    if sink_tokens < 0:
        raise ConfigError(f"bench generate: --sink-tokens must be >= 0, got {sink_tokens}")
    sinks = {"sink_tokens": int(sink_tokens)} if sink_tokens else {}
    windows = windows_for(prompt_len)

    def build():
        if model_dir is not None:
            return load_causal_lm(model_dir, device).eval()
        positions = prompt_len + new_tokens
        return random_causal_lm("llama", seed, n_layer, n_head, n_kv, head_dim, vocab, positions).eval().to(device)

    unpatched, patched = build(), build()
    shape = _shape(unpatched)
    handle = patch_model(patched, "full_adaptive", windows, attention_backend="banded", **sinks)
    mix = paper_mix(prompt_len, shape["n_head"])
    execute_windows(handle, mix)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(int(unpatched.config.vocab_size), (batch, prompt_len), generator=gen).to(device)
    steps = new_tokens - 1
    sides = {
        "windowed": _Decoder(patched, WindowedKVCache, ids, steps),
        "unpatched": _Decoder(unpatched, lambda: DynamicCache(config=unpatched.config), ids, steps),
    }
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else None
    timers = {name: timed(side.decode, sync=sync, setup=side.prefill) for name, side in sides.items()}
    # tokens/s ratio = unpatched time / windowed time: the unpatched side is the numerator
    raw = interleave({RATIO: (timers["unpatched"], timers["windowed"])}, pairs=pairs, progress=progress)
    doc = paired_report(raw, sides={RATIO: ("unpatched", "windowed")}, clock=clock)
    if handle.current_windows().tolist() != [mix] * shape["n_layer"]:
        raise RuntimeError("bench generate: the patched model left the window mix it was set to")
    seen = prompt_len + steps
    held = {name: cache_bytes(side.cache) for name, side in sides.items()}
    for name, side in sides.items():
        if side.cache.get_seq_length() != seen:
            raise RuntimeError(f"bench generate: the {name} cache holds {side.cache.get_seq_length()} positions")
    tokens = batch * steps
    per_side = by_clock(raw[RATIO][0]), by_clock(raw[RATIO][1])
    doc["decode_tokens_per_s"] = {
        name: tokens / statistics.median(times[clock]) for name, times in zip(("unpatched", "windowed"), per_side)
    }
    doc["kv_cache"] = dict(
        bytes=held,
        ratio=held["windowed"] / held["unpatched"],
        positions_seen=seen,
        sink_tokens=int(sink_tokens),
        **window_shares(mix, shape["n_kv_head"], seen, sink_tokens),
    )
    if sink_tokens:
        doc["kv_cache"]["kv_head_share_without_sinks"] = window_shares(mix, shape["n_kv_head"], seen)["kv_head_share"]
    doc["config"] = dict(
        model=str(model_dir) if model_dir is not None else "random Llama",
        prompt_len=prompt_len,
        new_tokens=new_tokens,
        decode_steps=steps,
        batch=batch,
        candidate_windows=list(windows),
        attention_backend="banded",
        pairs=pairs,
        device=str(device),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        **shape,
    )
    doc["paper_mix"] = mix
    return doc
