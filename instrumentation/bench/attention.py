"""Side-by-side timing of the attention backends (``aah-viz bench attention``).

One process, variants interleaved inside every repeat, medians reported. The full-attention
reference is ``scaled_dot_product_attention(..., is_causal=True)`` on all heads.
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch
import torch.nn.functional as F

from aah_viz.errors import ConfigError
from instrumentation.backends import get_backend
from instrumentation.backends.windows import acr, causal_coverage

PAPER_FRACTIONS = ((8, 10), (4, 2), (2, 2), (1, 2))  # (T / W, heads out of 16): Table 1, Full adaptive


def paper_mix(seq_len: int, n_heads: int) -> list[int]:
    """The paper's Full-adaptive bucket fractions (10 x T/8, 2 x T/4, 2 x T/2, 2 x T for 16 heads)."""
    exact = [n_heads * share / 16 for _, share in PAPER_FRACTIONS]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: n_heads - sum(counts)]:
        counts[i] += 1
    wins = []
    for (divisor, _), count in zip(PAPER_FRACTIONS, counts):
        wins += [max(1, seq_len // divisor)] * count
    return wins


def parse_mix(mix: str, seq_len: int, n_heads: int) -> list[int]:
    """``paper``, ``uniform:W`` or a comma-separated list of one window per head."""
    text = mix.strip()
    if text == "paper":
        return paper_mix(seq_len, n_heads)
    try:
        if text.startswith("uniform:"):
            return [int(text.split(":", 1)[1])] * n_heads
        wins = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--mix {mix!r}: expected 'paper', 'uniform:W' or a comma-separated list of integers"
        ) from None
    if len(wins) != n_heads or min(wins) < 1:
        raise ConfigError(f"--mix {mix!r}: a window list needs exactly {n_heads} positive windows (one per head)")
    return wins


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_variants(names, windows, device, need_stats_variant: bool):
    """name -> (callable(q, k, v) -> out tensor, supports_backward, note)."""
    variants = {}
    notes = {}
    for name in names:
        if name == "full":
            variants[name] = (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), True)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn_train, resolved_train, reason_train = get_backend(name, device=device, training=True)
            fn_eval, resolved_eval, reason_eval = get_backend(name, device=device, training=False)
        if resolved_eval != name:
            notes[name] = f"unavailable: {reason_eval}"
            continue
        backward = resolved_train == name
        if not backward:
            notes[name] = f"forward only: {reason_train}"
        variants[name] = (lambda q, k, v, fn=fn_eval: fn(q, k, v, windows).out, backward)
        if name == "banded" and need_stats_variant:
            variants["banded_stats"] = (lambda q, k, v, fn=fn_eval: fn(q, k, v, windows, need_stats=True).out, True)
    return variants, notes


def time_variants(variants, q, k, v, grad_out, repeats: int, progress=None):
    """Interleaved repeats; returns name -> {"fwd": [s...], "fwdbwd": [s...]}; one untimed warm-up round."""
    device = q.device
    raw = {name: {"fwd": [], "fwdbwd": []} for name in variants}
    for rep in range(repeats + 1):
        for name, (fn, backward) in variants.items():
            with torch.no_grad():
                _sync(device)
                start = time.perf_counter()
                fn(q, k, v)
                _sync(device)
                fwd = time.perf_counter() - start
            if backward:
                _sync(device)
                start = time.perf_counter()
                out = fn(q, k, v)
                out.backward(grad_out)
                _sync(device)
                fwdbwd = time.perf_counter() - start
                q.grad = k.grad = v.grad = None
                del out
            if rep > 0:
                raw[name]["fwd"].append(fwd)
                if backward:
                    raw[name]["fwdbwd"].append(fwdbwd)
        if progress is not None:
            progress.update(1)
    return raw


def realised_work(names, windows, q) -> dict:
    out = {"full": 1.0}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small = q[:, :, :, :].detach()
        for name in names:
            if name == "full":
                continue
            fn, resolved, _ = get_backend(name, device=q.device)
            if resolved == name:
                out[name] = fn(small, small, small, windows).realised_work
    return out


def summarise(raw, windows, seq_len, work, notes, config) -> dict:
    medians = {
        name: {kind: (statistics.median(xs) if xs else None) for kind, xs in kinds.items()}
        for name, kinds in raw.items()
    }
    ratios = {}

    def ratio(a, b, kind):
        if a in medians and b in medians and medians[a][kind] and medians[b][kind]:
            ratios[f"{a}_vs_{'dense' if b == 'dense_masked' else b}_{kind}"] = medians[a][kind] / medians[b][kind]

    for name in medians:
        if name in ("full",):
            continue
        for kind in ("fwd", "fwdbwd"):
            ratio(name, "full", kind)
            if name != "dense_masked":
                ratio(name, "dense_masked", kind)
    ratios = {key.replace("dense_masked_vs", "dense_vs"): value for key, value in ratios.items()}
    return {
        "config": config,
        "windows": windows,
        "causal_coverage": causal_coverage(windows, seq_len),
        "acr": acr(windows, seq_len),
        "realised_work": work,
        "medians_s": medians,
        "raw_s": raw,
        "ratios": ratios,
        "notes": notes,
    }


def bench_attention(
    *,
    seq_len=4096,
    heads=16,
    head_dim=64,
    batch=1,
    mix="paper",
    repeats=5,
    backends=None,
    device="cpu",
    dtype="float32",
    stats_variant=False,
    seed=0,
    progress=None,
) -> dict:
    """Medians of every variant forward and forward+backward, ratios to full attention, coverage."""
    device = torch.device(device)
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if dt is None:
        raise ConfigError(f"--dtype {dtype!r}: allowed values are float32, bfloat16, float16")
    windows = parse_mix(mix, seq_len, heads)
    if backends is None:
        backends = ["full", "dense_masked", "banded", "flex", "flash"]
    unknown = [b for b in backends if b not in ("full", "dense_masked", "banded", "flex", "flash")]
    if unknown:
        raise ConfigError(f"--backends: unknown {unknown}; allowed values are full, dense_masked, banded, flex, flash")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (
        torch.randn(batch, heads, seq_len, head_dim, generator=gen).to(device=device, dtype=dt).requires_grad_(True)
        for _ in range(3)
    )
    grad_out = torch.randn(batch, heads, seq_len, head_dim, generator=gen).to(device=device, dtype=dt)
    variants, notes = make_variants(backends, windows, device, stats_variant)
    raw = time_variants(variants, q, k, v, grad_out, repeats, progress)
    work = realised_work([n for n in backends if n in variants], windows, q)
    config = dict(
        seq_len=seq_len,
        heads=heads,
        head_dim=head_dim,
        batch=batch,
        mix=mix,
        repeats=repeats,
        device=str(device),
        dtype=dtype,
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        variants=list(variants),
    )
    return summarise(raw, windows, seq_len, work, notes, config)
