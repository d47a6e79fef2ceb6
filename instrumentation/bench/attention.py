"""Side-by-side timing of the attention backends (``aah-viz bench attention``).

One process; every round runs each variant once (order reversed every other round), and each ratio
is the median of its per-round ratios with a bootstrap 95% interval (``aah_viz.paired_timing``). The full-attention
reference is ``scaled_dot_product_attention(..., is_causal=True)`` on all heads.
"""

from __future__ import annotations

import statistics
import warnings

import torch
import torch.nn.functional as F

from aah_viz.errors import ConfigError
from aah_viz.paired_timing import DEFAULT_PAIRS, by_clock, paired_report, pairs_of, resolve_clock, round_robin, timed
from instrumentation.backends import BACKENDS, get_backend
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


def variant_sides(variants, q, k, v, grad_out) -> dict:
    """One timed side per variant and kind: ``name:fwd`` (no grad) and ``name:fwdbwd`` where it has a backward."""
    device = q.device
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    sides = {}
    for name, (fn, backward) in variants.items():

        def forward(fn=fn):
            with torch.no_grad():
                fn(q, k, v)

        sides[f"{name}:fwd"] = timed(forward, sync=sync)
        if backward:

            def forward_backward(fn=fn):
                fn(q, k, v).backward(grad_out)
                q.grad = k.grad = v.grad = None

            sides[f"{name}:fwdbwd"] = timed(forward_backward, sync=sync)
    return sides


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


def comparisons(names) -> dict:
    """ratio key -> (numerator side, denominator side): every variant against full and against dense_masked."""
    short = {"dense_masked": "dense"}
    out = {}
    for name in names:
        for base in ("full", "dense_masked"):
            if name in (base, "full") or base not in names:
                continue
            for kind in ("fwd", "fwdbwd"):
                out[f"{short.get(name, name)}_vs_{short.get(base, base)}_{kind}"] = (f"{name}:{kind}", f"{base}:{kind}")
    return out


def summarise(times, clock, windows, seq_len, work, notes, config) -> dict:
    names = list(dict.fromkeys(side.split(":")[0] for side in times))
    wanted = comparisons(names)
    raw = pairs_of(times, wanted)
    doc = paired_report(raw, sides={key: wanted[key] for key in raw}, clock=clock)
    per_clock = {side: by_clock(ms)[clock] for side, ms in times.items()}
    medians = {
        name: {
            kind: (statistics.median(per_clock[f"{name}:{kind}"]) if f"{name}:{kind}" in per_clock else None)
            for kind in ("fwd", "fwdbwd")
        }
        for name in names
    }
    return {
        **doc,
        "config": config,
        "windows": windows,
        "causal_coverage": causal_coverage(windows, seq_len),
        "acr": acr(windows, seq_len),
        "realised_work": work,
        "medians_s": medians,
        "notes": notes,
    }


def bench_attention(
    *,
    seq_len=4096,
    heads=16,
    head_dim=64,
    batch=1,
    mix="paper",
    pairs=DEFAULT_PAIRS,
    clock="auto",
    backends=None,
    device="cpu",
    dtype="float32",
    stats_variant=False,
    seed=0,
    progress=None,
) -> dict:
    """Every variant forward and forward+backward in paired rounds: median per-pair ratios to full attention
    and to dense_masked with bootstrap intervals (``aah_viz.paired_timing``), coverage and realised work."""
    device = torch.device(device)
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if dt is None:
        raise ConfigError(f"--dtype {dtype!r}: allowed values are float32, bfloat16, float16")
    windows = parse_mix(mix, seq_len, heads)
    known = ["full", *BACKENDS]
    if backends is None:
        backends = known
    unknown = [b for b in backends if b not in known]
    if unknown:
        raise ConfigError(f"--backends: unknown {unknown}; allowed values are {', '.join(known)}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (
        torch.randn(batch, heads, seq_len, head_dim, generator=gen).to(device=device, dtype=dt).requires_grad_(True)
        for _ in range(3)
    )
    grad_out = torch.randn(batch, heads, seq_len, head_dim, generator=gen).to(device=device, dtype=dt)
    variants, notes = make_variants(backends, windows, device, stats_variant)
    times = round_robin(variant_sides(variants, q, k, v, grad_out), pairs=pairs, progress=progress)
    work = realised_work([n for n in backends if n in variants], windows, q)
    config = dict(
        seq_len=seq_len,
        heads=heads,
        head_dim=head_dim,
        batch=batch,
        mix=mix,
        pairs=pairs,
        device=str(device),
        dtype=dtype,
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        variants=list(variants),
    )
    return summarise(times, resolve_clock(clock, str(device)), windows, seq_len, work, notes, config)
