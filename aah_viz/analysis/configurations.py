"""Which runs may be averaged together: the same model, sequence length, candidate windows and length of
training.

A mean over seeds means something only over runs of one configuration. Runs of a byte-level model
at T = 128 and adaptations of a pretrained model at T = 512 share regime names, not results, so
every page that pools runs splits them by :func:`configuration_of` first (pure, from manifests).
The plain-attention baseline executes no candidate window, so it joins every group of its model
and sequence length (as the export's tables do).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

BASELINE = "full_attention"  # its candidate windows are never in effect


def model_of(manifest: Mapping) -> str:
    """The model a run trained or adapted: a pretrained model's folder name, else the size preset."""
    retrofit = manifest.get("retrofit") if isinstance(manifest.get("retrofit"), Mapping) else {}
    config = manifest.get("config") if isinstance(manifest.get("config"), Mapping) else {}
    for value in (retrofit.get("model_dir"), config.get("model_dir"), manifest.get("probed_model")):
        if value:
            return PurePosixPath(str(value).replace("\\", "/")).name or str(value)
    preset = manifest.get("preset") or config.get("preset")
    if preset and ("/" in str(preset) or "\\" in str(preset)):  # a retrofit names its model folder here
        return PurePosixPath(str(preset).replace("\\", "/")).name
    if preset:
        return f"preset {preset}"
    shape = (manifest.get("n_layer"), manifest.get("n_head"))
    return f"{shape[0]} layers x {shape[1]} heads" if all(shape) else "unknown model"


def configuration_of(manifest: Mapping) -> tuple[str, int | None, tuple[int, ...], int | None]:
    """(model, sequence length, candidate windows, planned training steps); the baseline's windows are
    ``()``; steps are None where the manifest plans none (an evaluation, a probe). Runs trained for
    different lengths are not seeds of one experiment: their final values differ by design."""
    seq_len = manifest.get("seq_len")
    seq_len = int(seq_len) if isinstance(seq_len, (int, float)) else None
    windows = () if manifest.get("regime") == BASELINE else tuple(int(w) for w in manifest.get("windows") or ())
    steps = manifest.get("steps")
    steps = int(steps) if isinstance(steps, (int, float)) and not isinstance(steps, bool) else None
    return (model_of(manifest), seq_len, windows, steps)


def configuration_label(cfg: tuple) -> str:
    """``preset small, T = 128, windows 16/32/64/128, 280 steps`` (words a reader can match to a run)."""
    model, seq_len, windows, steps = cfg
    parts = [str(model), f"T = {seq_len}" if seq_len is not None else "T unknown"]
    parts.append("windows " + "/".join(str(w) for w in windows) if windows else "full attention only")
    if steps is not None:
        parts.append(f"{steps:,} steps")
    return ", ".join(parts)


def split_by_configuration(manifests: Mapping[str, Mapping]) -> list[tuple[str, list[str]]]:
    """``{key: manifest}`` -> ``[(label, keys)]``, the largest group first (then by label); a baseline
    joins every group of its model and T, or forms its own when there is none."""
    groups: dict[tuple, list[str]] = {}
    baselines: list[tuple[str, tuple]] = []
    for key, manifest in manifests.items():
        cfg = configuration_of(manifest)
        if cfg[2]:
            groups.setdefault(cfg, []).append(key)
        else:
            baselines.append((key, cfg))
    for key, cfg in baselines:
        homes = [g for g in groups if (g[0], g[1], g[3]) == (cfg[0], cfg[1], cfg[3])]
        for g in homes:
            groups[g].append(key)
        if not homes:
            groups.setdefault(cfg, []).append(key)
    out = [(configuration_label(cfg), keys) for cfg, keys in groups.items()]
    return sorted(out, key=lambda g: (-len(g[1]), g[0]))
