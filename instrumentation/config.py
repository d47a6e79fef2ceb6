"""AAHConfig: one dataclass for the backbone and every behaviour-changing AAH-v3 key (method §3).

Keys drop the reference's ``aah_v3_`` prefix. The dataclass defaults are the paper's base values
(method §13) at the ``tiny`` shape; ``AAHConfig.from_preset(size, regime=..., **overrides)``
applies a size preset, then a regime (a named set of flag overrides, never a code fork), then the
caller's overrides, and validates. ``from_reference_dict`` maps a reference ``GPTConfig``/YAML
dict (``aah_v3_*`` keys and the legacy aliases of §15.20) onto this config.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from aah_viz.errors import ConfigError
from aah_viz.method import RETIRED_KEYS, SIM_THRESHOLD
from aah_viz.regimes import REGIMES, did_you_mean

# RETIRED_KEYS (aah_viz.method, read by the light side too): keys that once existed but did nothing.

# Enumerated values of the keys that take a name (the reference's choices plus our named options).
CHOICES: dict[str, tuple[str, ...]] = {
    "controller_input_mode": ("base", "enriched", "contrastive", "position_aware", "relative_sibling_mean"),
    "controller_arch": ("mlp", "deep_mlp"),
    "controller_choice_mode": ("learned", "oracle_alternating"),
    "controller_pairwise_mode": ("none", "sibling_bias", "joint_sibling"),
    "hierarchy_ablation_mode": (
        "adaptive",
        "freeze_learned_topology",
        "freeze_after_warmup",
        "fixed_random",
        "fixed_deterministic",
    ),
    "window_ablation_mode": ("adaptive", "fixed_window", "shuffle_post_select", "random_uniform"),
    "group_feature_mode": ("mean", "mean_std", "mean_var", "mean_global_offset"),
    "upper_cluster_metric": ("cosine", "centered_cosine", "cosine_normdiff", "l2"),
    "attention_backend": ("dense_masked", "banded", "flex", "flash"),
    "controller_training": ("none", "straight_through", "soft_mixture"),
    "churn_clamp": ("all", "bonus"),
    "feature_normalization": ("none", "zscore"),
}

# The small-group merge scores a group against itself as -1 (method §5.6); with a merge threshold
# at or below it, a group can "merge" into itself and vanish, in the reference too.
SELF_MERGE_SCORE = -1.0


def merge_can_pick_itself(threshold: float, min_group_size: int) -> bool:
    """Whether a clustering with this (effective) threshold could merge a small group into itself."""
    return min_group_size > 1 and threshold <= SELF_MERGE_SCORE


@dataclass
class AAHConfig:
    # --- names (recorded so a run says what it is) ---
    preset: str = "custom"
    regime: str = "full_adaptive"

    # --- backbone (method §2) ---
    vocab_size: int = 256
    block_size: int = 64  # T_max: the sequence length of training and of the position table
    n_layer: int = 2
    n_head: int = 12
    n_embd: int = 96
    n_ff: int = 384
    dropout: float = 0.0
    bias: bool = True  # biases of the MLP linears (attention projections are always bias-free)

    # --- AAH-v3 (method §3), paper base values of §13 ---
    enabled: bool = True  # False: plain causal attention module (the pure baseline)
    windows: tuple[int, ...] = (8, 16, 32, 64)
    build_hierarchy: bool = True
    apply_window_control: bool = True
    control_dim: int = 16
    control_interval: int = 5
    sim_threshold: float = SIM_THRESHOLD
    super_threshold: float = 0.76
    max_depth: int = 4
    ema_alpha: float = 0.9
    churn_penalty: float = 0.02
    churn_clamp: str = "all"  # reference: clamp all of S at 1; "bonus": only bonused pairs (method text)
    min_group_size: int = 3
    warmup_steps: int = 3
    w_min: int = 4  # accounting only (§10.3)
    resolution_ema_alpha: float = 0.15
    post_warmup_ramp_steps: int = 0
    group_feature_mode: str = "mean"
    upper_cluster_metric: str = "cosine_normdiff"
    upper_l2_threshold: float = 0.0
    cosine_normdiff_scale: float = 16.0
    controller_input_mode: str = "enriched"
    controller_arch: str = "mlp"
    controller_logit_scale: float = 1.0
    controller_rng_reference_dim: int = 16
    controller_choice_mode: str = "learned"
    controller_pairwise_mode: str = "joint_sibling"
    pairwise_bias_scale: float = 1.0
    joint_output_scale: float = 1.0
    joint_hidden_dim: int = 64
    reuse_group_hierarchy: bool = False
    hierarchy_ablation_mode: str = "adaptive"
    fixed_hierarchy_seed: int = 0
    parent_constraint: bool = True
    window_ablation_mode: str = "adaptive"
    fixed_window: int = 0
    window_ablation_seed: int = 0
    attention_backend: str = "dense_masked"

    # --- baselines outside the reference (sliding_window, local_global_layers) ---
    static_window: int = 0  # > 0: plain attention with this causal band in every local layer, no routing
    global_every: int = 0  # with static_window: every N-th layer (1-based) is global (full causal)
    # per layer, per head: a causal band of its own (the head_windows baseline, e.g. from a profile)
    static_head_windows: tuple[tuple[int, ...], ...] = ()

    # --- named, non-default deviations from the reference (method §15; see docs/model.md) ---
    controller_training: str = "none"  # §15.1 / §9: none (reference), straight_through, soft_mixture
    controller_float32: bool = False  # §15.25: run the controller in float32 under autocast
    fix_group_ratios: bool = False  # §15.6: report the intended per-group window ratio
    # Issue requirements that deviate from the reference; set to the reference value by name:
    persist_routing_state: bool = True  # §15.10: the reference saves no routing state (False)
    eval_mutates_routing: bool = False  # §15.11: the reference mutates routing in eval (True)
    # Speed: head statistics only on forwards whose statistics the next forward's routing reads
    # (the forward before a routing update); routing is unchanged, see docs/model.md.
    stats_on_update_only: bool = False
    # Speed, approximate: head and group moments (§4.1, §4.2) from every s-th token only (1: all,
    # the reference); the clustered features change slightly, see docs/model.md.
    feature_token_stride: int = 1
    # Issue 37: the first k positions stay visible to every query besides its window, in every regime that
    # windows (attention sinks, StreamingLLM; Longformer's global tokens in causal form). 0: the method.
    sink_tokens: int = 0
    # Issue 26: the head features the adaptive build clusters, as they are (none: the paper) or
    # standardised per feature across the layer's heads (zscore), see docs/model.md.
    feature_normalization: str = "none"

    # ------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        if not isinstance(self.windows, (list, tuple)) or not all(
            isinstance(w, int) and not isinstance(w, bool) for w in self.windows
        ):
            _fail("windows", f"must be a list of integers (tokens), got {self.windows!r}")
        self.windows = tuple(int(w) for w in self.windows)
        self.static_head_windows = _head_windows(self.static_head_windows)
        validate(self)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def seq_len(self) -> int:
        return self.block_size

    @classmethod
    def from_preset(cls, size: str = "tiny", regime: str = "full_adaptive", **overrides: Any) -> AAHConfig:
        """Size preset, then the regime's flags, then ``overrides`` (any config key)."""
        if size not in PRESETS:
            raise ConfigError(f"unknown preset {size!r}; allowed presets are {', '.join(PRESETS)}")
        return cls.from_shape(PRESETS[size].values, size, regime, **overrides)

    @classmethod
    def from_shape(cls, shape: dict[str, Any], name: str, regime: str = "full_adaptive", **overrides: Any) -> AAHConfig:
        """Like ``from_preset`` with the size values given (``shape``) and recorded as ``preset=name``."""
        if regime not in REGIMES:
            raise ConfigError(
                f"unknown regime {regime!r}{did_you_mean(regime)}; allowed regimes are {', '.join(REGIMES)}"
            )
        overrides = dict(overrides)
        values = dict(shape)
        window = overrides.pop("window", None)
        spec = REGIMES[regime]
        values.update(spec.overrides)
        if spec.parameter is not None:
            windows = tuple(overrides.get("windows", values.get("windows", cls.windows)))
            default = windows[1] if len(windows) > 1 else windows[0]
            chosen = overrides.pop(spec.parameter, window if window is not None else default)
            values[spec.parameter] = int(chosen)
        elif window is not None:
            raise ConfigError(
                f"regime {regime!r} takes no window parameter; only "
                f"{', '.join(n for n, r in REGIMES.items() if r.parameter)} do"
            )
        values.update(overrides)
        values["preset"] = name
        values["regime"] = regime
        return cls.from_dict(values)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["windows"] = list(self.windows)
        d["static_head_windows"] = [list(row) for row in self.static_head_windows]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AAHConfig:
        """A config from its ``to_dict`` (retired keys dropped; an unknown key is refused by ``__init__``)."""
        if RETIRED_KEYS & set(d):  # written before these keys were removed: they never did anything
            d = {k: v for k, v in d.items() if k not in RETIRED_KEYS}
        if "seq_len" in d:  # accepted as an alias of block_size
            d = dict(d)
            seq_len = d.pop("seq_len")
            if d.setdefault("block_size", seq_len) != seq_len:
                raise ConfigError(f"seq_len={seq_len} and block_size={d['block_size']} disagree; pass one of them")
        return cls(**d)

    @classmethod
    def from_reference_dict(cls, d: dict[str, Any], **overrides: Any) -> AAHConfig:
        """Map a reference ``GPTConfig``/YAML dict (``aah_v3_*`` keys, legacy aliases) onto this config.

        ``grouping_enabled`` / ``control_enabled`` fill ``build_hierarchy`` / ``apply_window_control``
        only when those are absent (the reference trainer's fallback, method §3 and §15.20).
        """
        src = dict(d)
        out: dict[str, Any] = {}
        rename = {"W_min_gpu": "w_min", "flex_block_size": None}
        aliases = {}
        for key, value in src.items():
            name = key[len("aah_v3_") :] if key.startswith("aah_v3_") else key
            if name in ("grouping_enabled", "control_enabled"):
                aliases[name] = value
                continue
            name = rename.get(name, name)
            if name is None:
                continue
            out[name] = value
        if "build_hierarchy" not in out and "grouping_enabled" in aliases:
            out["build_hierarchy"] = bool(aliases["grouping_enabled"])
        if "apply_window_control" not in out and "control_enabled" in aliases:
            out["apply_window_control"] = bool(aliases["control_enabled"])
        known = {f.name for f in dataclasses.fields(cls)}
        out = {k: v for k, v in out.items() if k in known}
        out.update(overrides)
        return cls.from_dict(out)

    def replace(self, **changes: Any) -> AAHConfig:
        return dataclasses.replace(self, **changes)


def _refuse_unknown_keys(generated_init):
    """``AAHConfig(nonsense=1)`` (and ``from_dict`` with such a key) is a ConfigError naming the allowed keys."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        known = {f.name for f in dataclasses.fields(AAHConfig)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(map(repr, unknown))}; allowed keys are: {', '.join(sorted(known))}"
            )
        generated_init(self, *args, **kwargs)

    return __init__


AAHConfig.__init__ = _refuse_unknown_keys(AAHConfig.__init__)


# the largest size of each dimension a config may ask for (a model's tables are allocated from them)
SIZE_LIMITS = {
    "vocab_size": 1 << 22,
    "block_size": 1 << 20,
    "n_layer": 1024,
    "n_head": 1024,
    "n_embd": 1 << 16,
    "n_ff": 1 << 18,
}


def _fail(key: str, message: str) -> None:
    raise ConfigError(f"config key {key!r}: {message}")


def _head_windows(value: Any) -> tuple[tuple[int, ...], ...]:
    """``static_head_windows`` as nested tuples of ints (a manifest or checkpoint holds lists)."""
    try:
        rows = tuple(tuple(row) for row in value)
    except TypeError:
        rows = None
    if rows is None or not all(isinstance(w, int) and not isinstance(w, bool) for row in rows for w in row):
        _fail("static_head_windows", f"must be one list of integer windows per layer, got {value!r}")
    return tuple(tuple(int(w) for w in row) for row in rows)


def _check_types(cfg: AAHConfig) -> None:
    """Every key holds its default's type (ints may stand for floats) and every number is finite."""
    for f in dataclasses.fields(cfg):
        value, default = getattr(cfg, f.name), f.default
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            continue
        if not ok:
            kind = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}
            _fail(f.name, f"must be {kind[type(default)]}, got {value!r}")


def validate(cfg: AAHConfig) -> None:
    """Raise ConfigError naming the key and the allowed values for every invalid setting."""
    _check_types(cfg)
    for key, allowed in CHOICES.items():
        value = getattr(cfg, key)
        if value not in allowed:
            _fail(key, f"unknown value {value!r}; allowed values are {', '.join(allowed)}")
    for key in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "n_ff"):
        if int(getattr(cfg, key)) < 1:
            _fail(key, f"must be a positive integer, got {getattr(cfg, key)!r}")
        if int(getattr(cfg, key)) > SIZE_LIMITS[key]:  # sizes are allocated: bounded before anything is built
            _fail(key, f"{getattr(cfg, key)} is above {SIZE_LIMITS[key]}; allowed 1..{SIZE_LIMITS[key]}")
    if cfg.n_embd % cfg.n_head != 0:
        _fail(
            "n_head",
            f"must divide n_embd={cfg.n_embd} (head dim = n_embd / n_head); got n_head={cfg.n_head}; "
            f"allowed values are the divisors of {cfg.n_embd}: "
            f"{', '.join(str(h) for h in range(1, cfg.n_embd + 1) if cfg.n_embd % h == 0)}",
        )
    if cfg.feature_token_stride < 1:
        _fail("feature_token_stride", f"must be a positive integer (1: every token), got {cfg.feature_token_stride!r}")
    if not 0.0 <= cfg.dropout < 1.0:
        _fail("dropout", f"must be in [0, 1), got {cfg.dropout!r}")
    w = cfg.windows
    if len(w) == 0:
        _fail("windows", "needs at least one candidate window")
    if any(x < 1 for x in w):
        _fail("windows", f"every window must be a positive number of tokens, got {list(w)}")
    if any(b <= a for a, b in zip(w, w[1:])):
        _fail(
            "windows",
            f"must be strictly ascending (the parent constraint takes the minimum index, §15.17); "
            f"got {list(w)}, allowed e.g. {sorted(set(w))}",
        )
    if w[-1] > cfg.block_size:
        _fail(
            "windows",
            f"window {w[-1]} is above the sequence length block_size={cfg.block_size}; "
            f"allowed windows are 1..{cfg.block_size}",
        )
    for key in (
        "control_interval",
        "warmup_steps",
        "post_warmup_ramp_steps",
        "w_min",
        "min_group_size",
        "joint_hidden_dim",
        "control_dim",
        "controller_rng_reference_dim",
        "static_window",
        "global_every",
        "sink_tokens",
    ):
        if int(getattr(cfg, key)) < 0:
            _fail(key, f"must be >= 0, got {getattr(cfg, key)!r}")
    if not isinstance(cfg.sink_tokens, int) or isinstance(cfg.sink_tokens, bool):
        _fail("sink_tokens", f"must be a whole number of first positions kept (0: none), got {cfg.sink_tokens!r}")
    if cfg.max_depth < 1:
        _fail("max_depth", f"must be >= 1 (level 0 included), got {cfg.max_depth}")
    upper = cfg.upper_l2_threshold if cfg.upper_cluster_metric == "l2" else cfg.super_threshold
    for key, threshold, used in (
        ("sim_threshold", cfg.sim_threshold, True),
        ("upper_l2_threshold" if cfg.upper_cluster_metric == "l2" else "super_threshold", upper, cfg.max_depth > 1),
    ):
        if used and merge_can_pick_itself(threshold, cfg.min_group_size):
            _fail(
                key,
                f"{threshold} with min_group_size={cfg.min_group_size} lets a small group merge into itself "
                f"(its own merge score is {SELF_MERGE_SCORE}); allowed values are above {SELF_MERGE_SCORE}, "
                "or min_group_size=1",
            )
    if not 0.0 <= cfg.ema_alpha <= 1.0:
        _fail("ema_alpha", f"must be in [0, 1] (the weight of the previous EMA value), got {cfg.ema_alpha}")
    if not 0.0 <= cfg.resolution_ema_alpha < 1.0:
        _fail("resolution_ema_alpha", f"must be in [0, 1), got {cfg.resolution_ema_alpha}")
    if cfg.window_ablation_mode == "fixed_window" and cfg.fixed_window not in w:
        _fail("fixed_window", f"{cfg.fixed_window} is not a candidate window; allowed values are {list(w)}")
    if cfg.static_window > cfg.block_size:
        _fail("static_window", f"{cfg.static_window} is above block_size={cfg.block_size}; allowed 1..{cfg.block_size}")
    if cfg.global_every and not cfg.static_window:
        _fail("global_every", "needs static_window > 0 (layers alternate between that window and full attention)")
    if cfg.static_window and cfg.enabled:
        _fail(
            "static_window",
            "is a plain-attention baseline; it needs enabled=False (use regime='sliding_window' "
            "or 'local_global_layers')",
        )
    _check_head_windows(cfg)


def _check_head_windows(cfg: AAHConfig) -> None:
    rows = cfg.static_head_windows
    if cfg.regime == "head_windows" and not rows:
        _fail("static_head_windows", "regime 'head_windows' needs one window per head of every layer")
    if not rows:
        return
    if cfg.enabled or cfg.static_window:
        _fail("static_head_windows", "is a plain-attention baseline; use regime='head_windows' (no routing)")
    shape = (len(rows), {len(r) for r in rows})
    if shape != (cfg.n_layer, {cfg.n_head}):
        _fail(
            "static_head_windows",
            f"needs {cfg.n_layer} layers x {cfg.n_head} heads, got {len(rows)} layers of {sorted(shape[1])} heads",
        )
    bad = sorted({w for r in rows for w in r if not 1 <= w <= cfg.block_size})
    if bad:
        _fail("static_head_windows", f"windows {bad} are outside 1..block_size={cfg.block_size}")


def windows_for(seq_len: int) -> tuple[int, ...]:
    """The paper's candidate windows scaled to a sequence length: T/8, T/4, T/2, T (at least 1, no repeats)."""
    return tuple(sorted({max(1, seq_len // d) for d in (8, 4, 2, 1)}))


# ---------------------------------------------------------------------------- size presets
@dataclass(frozen=True)
class Preset:
    description: str
    values: dict


# One row a size: the values a preset sets, in the order of _PRESET_KEYS.
_PRESET_KEYS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "n_ff")
_PRESET_KEYS += ("windows", "w_min", "warmup_steps", "control_interval", "max_depth", "dropout")
_PRESET_VALUES = {
    "tiny": (256, 64, 2, 12, 96, 384, (8, 16, 32, 64), 4, 3, 5, 4, 0.0),
    "small": (256, 128, 4, 12, 192, 768, (16, 32, 64, 128), 4, 20, 5, 4, 0.1),
    "paper-1b": (50257, 4096, 16, 12, 1536, 6144, (512, 1024, 2048, 4096), 64, 100, 5, 4, 0.1),
}
_PRESET_DESCRIPTIONS = {
    "tiny": "unit tests, seconds on CPU: method §16's recommended CPU configuration",
    "small": "CPU demo with byte tokens: a few hundred steps in minutes",
    "paper-1b": "the paper's 4096-token shape (method §16 '1b'); for GPUs",
}
PRESETS: dict[str, Preset] = {
    name: Preset(_PRESET_DESCRIPTIONS[name], dict(zip(_PRESET_KEYS, values))) for name, values in _PRESET_VALUES.items()
}
