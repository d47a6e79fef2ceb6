"""What decides the float rounding of a CPU run: the fingerprint a bit-for-bit recording is keyed by.

The instruction-set name torch reports does not determine the bits: MKL and oneDNN pick kernels by
CPU vendor, model and features (AMX, VNNI, BF16) and by their own version, and environment variables
can limit them. Two machines that both say "AVX512" round differently. So a recording is replayed
``==`` only where every field below equals the recording machine's, and within tolerance elsewhere.

``python tests/machine_fingerprint.py`` prints this machine's fingerprint as JSON: store it beside a
new recording as ``fingerprint.json`` (``reference_replay.recording_fingerprint`` reads it).
"""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path

# What a fingerprint holds; a recording whose fingerprint lacks any of them never matches.
FIELDS = (
    "machine",  # platform.machine(): x86_64, aarch64, ...
    "cpu_vendor",
    "cpu_model",
    "isa_flags",  # the vector and matrix extensions the math libraries dispatch on, sorted
    "torch",  # version and build
    "torch_capability",  # torch.backends.cpu.get_cpu_capability()
    "mkl",
    "onednn",
    "threads",  # the replay's threads (recordings were made on one)
    "kernel_env",  # variables that limit or pin the kernels, as set
)
# The vector and matrix extensions of x86 (AVX, AVX-512, AMX, FMA, F16C) and ARM (NEON/ASIMD, SVE,
# SME, BF16, I8MM, FP16, dot product) that the math libraries choose their kernels by.
ISA_FLAG = re.compile(r"^(avx|amx|fma|f16c|asimd|sve|sme(?![ap]$)|bf16|i8mm|fphp|fp16)")  # not x86's smep/smap
KERNEL_ENV = (
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "MKL_DEBUG_CPU_TYPE",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
)
REPLAY_THREADS = 1


def cpuinfo_fields(text: str) -> dict[str, str]:
    """Vendor, model and flags from /proc/cpuinfo's first processor (x86 or ARM spelling)."""
    first: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if first:
                break
            continue
        key, _, value = line.partition(":")
        first.setdefault(key.strip().lower(), value.strip())
    vendor = first.get("vendor_id") or first.get("cpu implementer")
    model = first.get("model name") or " ".join(
        f"{k} {first[k]}" for k in ("cpu architecture", "cpu variant", "cpu part", "cpu revision") if k in first
    )
    flags = (first.get("flags") or first.get("features") or "").split()
    return {
        "cpu_vendor": vendor,
        "cpu_model": model or None,
        "isa_flags": sorted({f for f in flags if ISA_FLAG.match(f)}),
    }


def library_versions(config_text: str) -> dict[str, str | None]:
    """MKL's and oneDNN's versions from ``torch.__config__.show()``."""
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config_text)
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v([\w.]+)", config_text)
    return {"mkl": mkl.group(1) if mkl else "none", "onednn": onednn.group(1) if onednn else "none"}


def this_machine(environ=os.environ, cpuinfo: str | None = None) -> dict:
    """This process's fingerprint (with the replay's thread count)."""
    import torch

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    cpu = cpuinfo_fields(cpuinfo)
    if not cpu["cpu_model"]:
        cpu["cpu_model"] = platform.processor() or None
    return {
        "machine": platform.machine(),
        **cpu,
        "torch": torch.__version__,  # version and build (``+cpu``)
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        **library_versions(torch.__config__.show()),
        "threads": REPLAY_THREADS,
        "kernel_env": {k: environ[k] for k in KERNEL_ENV if environ.get(k)},
    }


def differences(ours: dict, recorded: dict | None) -> dict[str, tuple]:
    """Field -> (ours, recorded) for every field that differs or that the recording does not know."""
    recorded = recorded or {}
    return {f: (ours.get(f), recorded.get(f)) for f in FIELDS if recorded.get(f) is None or ours.get(f) != recorded[f]}


def matches(ours: dict, recorded: dict | None) -> bool:
    return not differences(ours, recorded)


def similarity(ours: dict, recorded: dict | None) -> tuple:
    """How close a recording's machine is to ours, for choosing the nearest: same capability first,
    then the number of fields that agree."""
    recorded = recorded or {}
    same = sum(recorded.get(f) is not None and ours.get(f) == recorded[f] for f in FIELDS)
    return (recorded.get("torch_capability") == ours.get("torch_capability"), same)


def describe_differences(ours: dict, recorded: dict | None) -> str:
    """One line: the fields where this machine and the recording's differ (``?`` where unknown)."""
    parts = []
    for field, (a, b) in differences(ours, recorded).items():
        parts.append(f"{field} {_short(a)} here, {'?' if b is None else _short(b)} there")
    return "; ".join(parts)


def _short(value) -> str:
    if isinstance(value, list):
        return "+".join(value) if len(value) <= 4 else f"{len(value)} flags"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if value else "{}"
    return str(value)


if __name__ == "__main__":
    print(json.dumps(this_machine(), indent=2))
