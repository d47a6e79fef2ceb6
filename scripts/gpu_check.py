"""CUDA check of the attention backends (run through scripts/gpu_check.sh).

1. Parity: every backend that runs on this device against ``dense_masked`` in float32
   (outputs and q/k/v gradients within 1e-5, TF32 off) and in bfloat16 (against the float32
   reference, within bfloat16 rounding), with random per-head windows including windows at or
   above T and T not a multiple of the block size.
2. The attention benchmark (``aah-viz bench attention`` at T=4096, 16 heads, head dim 64,
   paper mix) in float32 and bfloat16.
3. Retrofit: patched against unpatched random Llama, Mistral, Qwen2 and Qwen3 models (full
   attention, and every window T on each backend), then ``aah-viz bench retrofit`` at T=1024.

Prints one JSON document; exits 1 when a parity check fails, 2 without CUDA. A time budget
keeps the whole run under five minutes: later sections are skipped (and say so) when it runs out.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUDGET_S = 270.0
START = time.monotonic()


def left() -> float:
    return BUDGET_S - (time.monotonic() - START)


REPORT: dict = {}


def main() -> int:
    try:
        import torch
    except ImportError:
        print("gpu_check: PyTorch is not installed; install the model side first", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device is available here; this check needs a GPU (nothing was run)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from instrumentation.backends import get_backend
    from instrumentation.backends.dense_masked import dense_masked_attention
    from instrumentation.bench import bench_attention

    device = torch.device("cuda")
    report = REPORT
    report.update(device=torch.cuda.get_device_name(device), torch=torch.__version__, parity=[], bench={})
    failed = False
    cases = [((2, 6, 300, 64), [1, 37, 300, 1000, 128, 64]), ((1, 4, 1031, 32), [2048, 256, 100, 1031])]
    for backend in ("banded", "flex", "flash"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn, resolved, reason = get_backend(backend, device=device, training=True)
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
            # FlexAttention compiles per shape and dtype: one shape keeps it inside the budget
            for shape, wins in cases if backend == "banded" else cases[:1]:
                entry = {"backend": backend, "dtype": str(dtype).replace("torch.", ""), "shape": list(shape)}
                if backend == "flash" and dtype == torch.float32:  # flash-attn has no float32 kernel
                    entry.update(skipped="flash-attn runs float16/bfloat16 only; float32 falls back to banded")
                    report["parity"].append(entry)
                    continue
                if resolved != backend:
                    entry.update(skipped=reason)
                    report["parity"].append(entry)
                    continue
                if left() < 150:
                    entry.update(skipped="time budget")
                    report["parity"].append(entry)
                    continue
                gen = torch.Generator().manual_seed(sum(shape))
                base = [torch.randn(*shape, generator=gen) for _ in range(4)]
                ref_in = [x.to(device).requires_grad_(True) for x in base[:3]]
                grad_out = base[3].to(device)
                ref = dense_masked_attention(*ref_in, wins, need_stats=True)
                ref_grads = torch.autograd.grad(ref.out, ref_in, grad_out)
                got_in = [x.to(device=device, dtype=dtype).requires_grad_(True) for x in base[:3]]
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = fn(*got_in, wins, need_stats=True)
                    got_grads = torch.autograd.grad(got.out, got_in, grad_out.to(dtype))
                errors = {"out": (got.out.float() - ref.out).abs().max().item()}
                for name, a, b in zip("qkv", got_grads, ref_grads):
                    errors[f"d{name}"] = (a.float() - b).abs().max().item()
                scale = max(1.0, ref.out.abs().max().item())
                ok = all(e <= tol * scale for e in errors.values())
                if got.stats is not None:
                    for field in ("entropy", "norm", "usage"):
                        errors[field] = (getattr(got.stats, field) - getattr(ref.stats, field)).abs().max().item()
                    ok = ok and all(errors[f] <= 10 * tol for f in ("entropy", "norm", "usage"))
                entry.update(
                    ran=got.backend,
                    max_abs_error=errors,
                    tolerance=tol,
                    ok=ok,
                    warnings=[str(w.message) for w in caught],
                )
                failed = failed or not ok or got.backend != backend
                report["parity"].append(entry)
    for dtype in ("float32", "bfloat16"):
        if left() < 40:
            report["bench"][dtype] = {"skipped": "time budget"}
            continue
        report["bench"][dtype] = bench_attention(
            seq_len=4096,
            heads=16,
            head_dim=64,
            batch=1,
            mix="paper",
            pairs=9,
            clock="wall",
            device="cuda",
            dtype=dtype,
            backends=["full", "dense_masked", "banded", "flex", "flash"],
        )
        report["bench"][dtype].pop("raw_s", None)
    # 3. Retrofit: patched vs unpatched random models (each family), then bench retrofit at T=1024.
    if left() > 60:
        from instrumentation.retrofit.parity import parity

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report["retrofit_parity"] = parity("cuda")
        failed = failed or not all(r["ok"] for r in report["retrofit_parity"])
    else:
        report["retrofit_parity"] = {"skipped": "time budget"}
    if left() > 40:
        from instrumentation.bench.retrofit import bench_retrofit

        report["bench_retrofit"] = bench_retrofit(seq_len=1024, pairs=9, clock="wall", device="cuda")
        report["bench_retrofit"].pop("raw_s", None)
    else:
        report["bench_retrofit"] = {"skipped": "time budget"}
    report["ok"] = not failed
    report["elapsed_s"] = time.monotonic() - START
    print(json.dumps(report, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the shell wrapper's timeout: print what was measured
        REPORT.update(ok=False, interrupted="time limit reached", elapsed_s=time.monotonic() - START)
        print(json.dumps(REPORT, indent=2))
        sys.exit(1)
