"""The frontier's plan: its settings, the text split into adaptation and held-out parts, the configurations
it evaluates, and the static per-head windows (``head_windows_pNN``) a profile gives each head."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aah_viz.errors import ConfigError, UnsafePathError
from instrumentation.config import windows_for

AAH_REGIMES = ("full_adaptive", "grouping_off", "fixed_random_grouping")
PROFILE_SHARE = 0.95
SINK_PROFILE_SHARES = (0.95, 0.90)  # the profiled per-head rows with sinks


@dataclass
class FrontierConfig:
    model_dir: str
    data: str
    out: str
    seq_len: int = 512
    windows: tuple[int, ...] | None = None  # default: T/8, T/4, T/2, T
    adapt_steps: int = 0  # 0: no adapted rows
    regimes: tuple[str, ...] = AAH_REGIMES
    eval_blocks: int = 32
    eval_share: float = 0.1
    profile_blocks: int = 8
    timing_pairs: int = 5
    adapt_lr: float = 1e-4
    adapt_batch_size: int = 1
    seed: int = 0
    threads: int | None = None
    device: str = "cpu"
    progress: bool = True
    overwrite: bool = False
    aah_overrides: dict = field(default_factory=dict)  # AAH config keys of the routed regimes (--set)
    sink_tokens: tuple[int, ...] = ()  # --sink-tokens: each k adds the rows with the first k positions kept
    retrieval: int = 0  # --retrieval: passkey questions per depth (5 depths) asked of every configuration
    adapt_seeds: tuple[int, ...] = ()  # --adapt-seeds: further seeds of every adapted row, beside --seed

    def candidate_windows(self) -> tuple[int, ...]:
        return tuple(self.windows) if self.windows else windows_for(self.seq_len)

    def settings(self, data_sha256: str) -> dict:
        """What must match for a second call to continue this frontier."""
        keep = ("seq_len", "adapt_steps", "eval_blocks", "eval_share", "profile_blocks", "adapt_lr", "seed")
        out = {k: getattr(self, k) for k in keep}
        out.update(
            windows=list(self.candidate_windows()),
            regimes=list(self.regimes),
            adapt_batch_size=self.adapt_batch_size,
            model_dir=str(Path(self.model_dir).resolve()),
            data_sha256=data_sha256,
        )
        if self.aah_overrides:  # only when given: frontiers made without it continue as they were
            out["aah_overrides"] = dict(sorted(self.aah_overrides.items()))
        if self.sink_tokens:
            out["sink_tokens"] = sorted({int(k) for k in self.sink_tokens})
        if self.retrieval:
            out["retrieval"] = int(self.retrieval)
        if self.extra_seeds():
            out["adapt_seeds"] = list(self.extra_seeds())
        return out

    def extra_seeds(self) -> tuple[int, ...]:
        """The adaptation seeds beside ``seed``, sorted, each once."""
        return tuple(sorted({int(s) for s in self.adapt_seeds} - {int(self.seed)}))


# ----------------------------------------------------------------------------- text
def split_text(path: Path, eval_share: float) -> tuple[str, str, int]:
    """(adaptation text, evaluation text, index of the first evaluation line)."""
    if not 0.0 < eval_share < 1.0:
        raise ConfigError(f"--eval-share must be between 0 and 1, got {eval_share}")
    if not path.is_file():
        raise ConfigError(f"--data {path} is not a file; give a plain-text (UTF-8) file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); convert it to UTF-8 first") from None
    total = sum(len(line) for line in lines)
    seen, cut = 0, len(lines)
    for i, line in enumerate(lines):
        if seen >= total * (1.0 - eval_share):
            cut = i
            break
        seen += len(line)
    return "".join(lines[:cut]), "".join(lines[cut:]), cut


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Configuration:
    name: str
    family: str  # unpatched | patch | sliding_window | head_windows | zero_shot | adapted
    regime: str | None = None
    window: int | None = None
    sinks: int = 0  # sink_tokens: the first positions every query keeps
    share: float = PROFILE_SHARE  # head_windows: the share of each head's mass its window keeps
    seed: int | None = None  # adapted: a seed beside the frontier's own (None: --seed)


def _sink_suffix(k: int) -> str:
    return f"_sink{k}" if k else ""


def plan(fc: FrontierConfig) -> list[Configuration]:
    T = fc.seq_len
    rows = [Configuration("unpatched", "unpatched"), Configuration("full_attention", "patch", "full_attention")]
    rows += [
        Configuration(f"sliding_window_{w}", "sliding_window", "sliding_window", w)
        for w in fc.candidate_windows()
        if w < T
    ]
    rows.append(Configuration(f"head_windows_p{round(PROFILE_SHARE * 100)}", "head_windows", "head_windows"))
    rows += [Configuration(f"{r}_zero_shot", "zero_shot", r) for r in fc.regimes]
    if fc.adapt_steps > 0:
        rows += _adapted(fc, 0)
    for k in sorted({int(k) for k in fc.sink_tokens}):
        s = _sink_suffix(k)
        rows += [
            Configuration(f"sliding_window_{w}{s}", "sliding_window", "sliding_window", w, sinks=k)
            for w in fc.candidate_windows()
            if w < T
        ]
        rows += [
            Configuration(
                f"head_windows_p{round(share * 100)}{s}", "head_windows", "head_windows", sinks=k, share=share
            )
            for share in SINK_PROFILE_SHARES
        ]
        rows += [Configuration(f"{r}_zero_shot{s}", "zero_shot", r, sinks=k) for r in fc.regimes]
        if fc.adapt_steps > 0:
            rows += _adapted(fc, k)
    return rows


def _adapted(fc: FrontierConfig, sinks: int) -> list[Configuration]:
    """Each regime adapted with ``sinks``: from --seed, then from each further --adapt-seeds seed."""
    s = _sink_suffix(sinks)
    rows = [Configuration(f"{r}_adapted{s}", "adapted", r, sinks=sinks) for r in fc.regimes]
    rows += [
        Configuration(f"{r}_adapted{s}_seed{seed}", "adapted", r, sinks=sinks, seed=seed)
        for r in fc.regimes
        for seed in fc.extra_seeds()
    ]
    return rows


def adapt_run_dir(out: Path, regime: str, sinks: int = 0, seed: int | None = None) -> Path:
    """Where the adaptation of ``regime`` (with ``sinks``, from a further ``seed``) is recorded: a retrofit run
    beside the frontier run (never through a symbolic link: a link there would send the adaptation, and its
    pruning, elsewhere)."""
    suffix = _sink_suffix(sinks).replace("_", "-") + ("" if seed is None else f"-seed{int(seed)}")
    sibling = out.parent / f"{out.name}-{regime}{suffix}"
    if sibling.is_symlink():
        raise UnsafePathError(
            f"{sibling} is a symbolic link; the frontier's adaptation runs are written beside --out, never through "
            "a link: remove it, or give another --out"
        )
    return sibling


# ----------------------------------------------------------------------------- the static per-head windows
def head_windows_from_needed(needed: np.ndarray, candidates: tuple[int, ...]) -> list[list[int]]:
    """Per head, the smallest candidate window at least its needed span (the largest if none is)."""
    cands = np.asarray(sorted(candidates))
    pos = np.searchsorted(cands, np.asarray(needed), side="left").clip(max=len(cands) - 1)
    return cands[pos].astype(int).tolist()


def profiled_windows(detail: dict, candidates: tuple[int, ...], conf: Configuration) -> list[list[int]]:
    """The per-head windows of a ``head_windows`` row from the profile's ``detail``: each head the smallest
    candidate keeping ``conf.share`` of its mass (the mass on the first ``conf.sinks`` positions kept)."""
    key = f"needed_{round(conf.share * 100)}"
    needed = detail["needed_with_sinks"][str(conf.sinks)][key] if conf.sinks else detail[key]
    return head_windows_from_needed(np.asarray(needed), candidates)
