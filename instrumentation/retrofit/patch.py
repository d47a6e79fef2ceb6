"""Patch the self-attention of a pretrained Hugging Face model with the project's AAH-v3 layers.

Every module with ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` (Llama, Mistral, Qwen2, Qwen3)
keeps its own projections, q/k norms, rotary positions and scaling; its grouped key/value heads
are repeated to the query heads (as the model's ``repeat_kv`` does), and the per-head tensors go
to ``attend`` of an ``AAHAttention`` (or, for the plain regimes, a ``CausalSelfAttention``) built
with ``project=False``. Routing and execution are therefore the project's own: the same state
machine, hierarchy, controller and backends as ``AAHTransformer``; no second implementation.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from aah_viz import coverage
from aah_viz.errors import ConfigError
from instrumentation.attention import AAHAttention, CausalSelfAttention
from instrumentation.config import AAHConfig
from instrumentation.model import layer_window
from instrumentation.retrofit.decode import windowed_attention
from instrumentation.retrofit.masks import allowed_keys
from instrumentation.routed_layers import RoutedLayers

PAPER_WINDOWS = (512, 1024, 2048, 4096)
HANDLE_ATTRIBUTE = "aah_routing"  # where a patched model carries its handle (the recorder looks here)
TRAIN_CHOICES = ("aah", "aah+head", "all")
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules of ``model`` in layer order (those with q/k/v/o projections)."""
    found = [m for m in model.modules() if all(isinstance(getattr(m, p, None), nn.Module) for p in _PROJECTIONS)]
    if not found:
        raise ConfigError(
            f"{type(model).__name__} has no attention module with {', '.join(_PROJECTIONS)}; "
            "patch_model supports the Llama, Mistral, Qwen2 and Qwen3 families"
        )
    return found


def _heads(module: nn.Module, hf_config) -> tuple[int, int, int]:
    """(query heads, key/value heads, head dim), from the projection widths (robust to config aliases)."""
    head_dim = int(getattr(module, "head_dim", 0) or hf_config.hidden_size // hf_config.num_attention_heads)
    n_q = module.q_proj.out_features // head_dim
    n_kv = module.k_proj.out_features // head_dim
    if n_q % n_kv:
        raise ConfigError(f"{n_q} query heads are not a multiple of {n_kv} key/value heads")
    return n_q, n_kv, head_dim


def retrofit_config(
    model: nn.Module, regime: str = "full_adaptive", windows: Sequence[int] = PAPER_WINDOWS, **overrides: Any
) -> AAHConfig:
    """The ``AAHConfig`` of a patched model: its shape, the regime, then ``overrides`` (any config key).

    Windows beyond the model's positions or its own sliding window are clamped to that limit, with a
    warning (``fit_windows``). ``block_size`` defaults to the largest window (the paper's setting:
    T = 4096 = max window); there is no warm-up (the pretrained model's routing starts at its first
    forward, as in the reference patch); execution defaults to the ``banded`` backend.
    """
    mods = attention_modules(model)
    hf = model.config
    n_q, _, head_dim = _heads(mods[0], hf)
    windows = fit_windows(tuple(int(w) for w in windows), hf)
    limit = window_limit(hf)
    if limit is not None and int(overrides.get("block_size", 0) or 0) > limit[0]:
        raise ConfigError(f"block_size {overrides['block_size']} exceeds {limit[1]}")
    shape = dict(
        vocab_size=int(hf.vocab_size),
        n_layer=len(mods),
        n_head=n_q,
        n_embd=n_q * head_dim,
        n_ff=int(getattr(hf, "intermediate_size", 0) or 4 * hf.hidden_size),
        dropout=float(getattr(hf, "attention_dropout", 0.0) or 0.0),
        bias=bool(getattr(hf, "mlp_bias", False)),  # the model's MLP linears (Llama's mlp_bias; none elsewhere)
        windows=windows,
        block_size=max(windows),
        warmup_steps=0,
        attention_backend="banded",
    )
    name = str(getattr(hf, "_name_or_path", "") or getattr(hf, "model_type", "hf")) or "hf"
    return AAHConfig.from_shape(shape, name, regime, **overrides)


def window_limit(hf_config) -> tuple[int, str] | None:
    """The longest window the model can execute as trained, and why: its positions
    (``max_position_embeddings``) or its own sliding window (Mistral; Qwen2 with sliding layers),
    which stays in the mask the model builds."""
    limits = []
    positions = getattr(hf_config, "max_position_embeddings", None)
    if positions:
        limits.append((int(positions), f"the model's {int(positions)} positions (max_position_embeddings)"))
    sliding = getattr(hf_config, "sliding_window", None)
    layer_types = getattr(hf_config, "layer_types", None)
    if sliding and (layer_types is None or "sliding_attention" in layer_types):
        limits.append((int(sliding), f"the model's own sliding window of {int(sliding)} tokens"))
    return min(limits) if limits else None


def fit_windows(windows: tuple[int, ...], hf_config) -> tuple[int, ...]:
    """``windows`` with those beyond the model's limit (``window_limit``) clamped to it, with a warning."""
    limit = window_limit(hf_config)
    if limit is None or max(windows) <= limit[0]:
        return windows
    over = [w for w in windows if w > limit[0]]
    warnings.warn(
        f"windows {', '.join(map(str, over))} exceed {limit[1]}: clamped to {limit[0]}", UserWarning, stacklevel=3
    )
    return tuple(sorted({min(w, limit[0]) for w in windows}))


def _rotary(module: nn.Module):
    fn = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb", None)
    if fn is None:
        raise ConfigError(f"{type(module).__name__}: its modeling module has no apply_rotary_pos_emb")
    return fn


def _cache_of(kwargs: dict):
    for key in ("cache", "past_key_values", "past_key_value"):
        if kwargs.get(key) is not None:
            return kwargs[key]
    return None


def _attentions_requested(kwargs) -> bool:
    """Whether the caller asked the model for attention probabilities.

    transformers 4 passes ``output_attentions`` down to the attention module; transformers 5 does
    not: it collects each attention module's second output while a collector with an
    ``attentions`` entry is active (``utils.output_capturing``).
    """
    if kwargs.get("output_attentions"):
        return True
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:
        return False
    collected = _active_collector.get()
    return collected is not None and "attentions" in collected


def _patched_forward(self, hidden_states: torch.Tensor, position_embeddings=None, attention_mask=None, **kwargs):
    """The replacement forward: the model's projections, norms, rotary and mask; the project's attention.

    A forward on an empty cache (or none) routes and executes its windows together with the model's
    attention mask (padding), then stores its keys and values; a forward whose cache already holds
    tokens (the decode steps of ``generate``) attends over the cached keys, each head within the window
    the prompt's forward executed (``decode.windowed_attention``), and does not route.
    """
    spec = self._aah_spec
    if position_embeddings is None:
        raise ConfigError(f"{type(self).__name__}: patched attention needs the model's position_embeddings (cos, sin)")
    cache = _cache_of(kwargs)
    B, T, _ = hidden_states.shape
    shape = (B, T, -1, spec.head_dim)
    q = self.q_proj(hidden_states).view(shape)
    k = self.k_proj(hidden_states).view(shape)
    v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
    if getattr(self, "q_norm", None) is not None:
        q, k = self.q_norm(q), self.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    cos, sin = position_embeddings
    q, k = spec.rotary(q, k, cos, sin)
    past = 0 if cache is None else cache.get_seq_length(self.layer_idx)
    if past > 0:
        y = _decode(self, q, k, v, cache, attention_mask)
        probs = None
    else:
        mask = allowed_keys(attention_mask, T)
        want_probs = _attentions_requested(kwargs)
        y, probs = self.aah.attend(
            q,
            _per_query_head(k, spec.groups),
            _per_query_head(v, spec.groups),
            need_probs=want_probs,
            scale=spec.scaling,
            mask=mask,
        )
        if cache is not None:
            _store(self, cache, k, v)
    y = y.transpose(1, 2).reshape(B, T, -1)
    return self.o_proj(y), probs


def _per_query_head(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Grouped-query attention: each key/value head serves ``groups`` query heads (the model's ``repeat_kv``)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _store(module, cache, k, v) -> None:
    """The prompt's keys and values into ``cache``: per head as far as its window reaches (``WindowedKVCache``),
    else whole (``Cache.update``)."""
    from instrumentation.retrofit.kv_cache import WindowedKVCache, kv_reach

    if isinstance(cache, WindowedKVCache):
        reach = kv_reach(module.aah.band_windows(), k.shape[1])
        cache.fill(module.layer_idx, k, v, reach, module.aah.cfg.sink_tokens)
    else:
        cache.update(k, v, module.layer_idx)


def _decode(module, q, k, v, cache, attention_mask) -> torch.Tensor:
    """New queries over the cached keys, each head within the window the prompt's forward executed."""
    from instrumentation.retrofit.kv_cache import WindowedKVCache

    if isinstance(cache, WindowedKVCache):
        kv = cache.extend(module.layer_idx, k, v)
        total = cache.layer(module.layer_idx).seen
    else:
        keys, values = cache.update(k, v, module.layer_idx)
        kv = [(list(range(keys.shape[1])), keys, values, 0)]
        total = keys.shape[2]
    allowed = allowed_keys(attention_mask, q.shape[2])
    return windowed_attention(
        q,
        kv,
        module.aah.band_windows(),
        scale=module._aah_spec.scaling,
        allowed=allowed,
        sinks=module.aah.cfg.sink_tokens,
        total=total,
    )


class _Spec:
    """What the patched forward needs besides the module's own submodules."""

    def __init__(self, module: nn.Module, hf_config, original):
        n_q, n_kv, head_dim = _heads(module, hf_config)
        self.head_dim = head_dim
        self.groups = n_q // n_kv
        self.scaling = float(getattr(module, "scaling", head_dim**-0.5))
        self.rotary = _rotary(module)
        self.original = original


class RetrofitHandle(RoutedLayers):
    """The routing side of a patched model: the trainer interface of ``RoutedLayers``, plus
    ``unpatch``, parameter selection for adaptation and the per-head diagnostics.

    The model carries it as ``model.aah_routing``; the recorder and the integrations find it there.
    """

    def __init__(self, model: nn.Module, cfg: AAHConfig, modules: list[nn.Module]):
        self.model = model
        self.cfg = cfg
        self._modules = modules
        self.patched = True

    def attention_layers(self) -> list[nn.Module]:
        return [m.aah for m in self._modules]

    def parameters(self) -> Iterator[nn.Parameter]:
        """The AAH parameters (controller, joint scorer, sibling bias) of every layer."""
        for layer in self.attention_layers():
            yield from layer.parameters()

    def train_parameters(self, which: str = "aah") -> list[nn.Parameter]:
        """Set ``requires_grad`` for adaptation and return the trained parameters.

        ``aah``: the AAH parameters only; ``aah+head``: plus the output head; ``all``: everything.
        """
        if which not in TRAIN_CHOICES:
            raise ConfigError(f"train: unknown value {which!r}; allowed values are {', '.join(TRAIN_CHOICES)}")
        keep = {id(p) for p in self.parameters()}
        if which == "aah+head":
            head = self.model.get_output_embeddings()
            if head is not None:
                keep |= {id(p) for p in head.parameters()}
        chosen = []
        for p in self.model.parameters():
            p.requires_grad_(which == "all" or id(p) in keep)
            if p.requires_grad:
                chosen.append(p)
        return chosen

    def unpatch(self) -> None:
        """Restore every original forward and remove the AAH layers (idempotent)."""
        if not self.patched:
            return
        for m in self._modules:
            saved = m._aah_saved_forward
            if saved is None:
                del m.forward
            else:
                m.forward = saved
            del m._aah_spec, m._aah_saved_forward
            del m.aah
        if getattr(self.model, HANDLE_ATTRIBUTE, None) is self:
            delattr(self.model, HANDLE_ATTRIBUTE)
        self.patched = False

    def diagnostics_rows(self) -> list[dict[str, Any]]:
        """The reference's heatmap rows of the last forward, one per (layer, head): the executed window
        index and size (``selected_*`` and ``final_*`` alike, as in the reference), the raw level-0
        argmax before the parent clamp (``pre_clamp_window_idx``; the executed index where that forward
        computed none), and the layer's ACR."""
        rows = []
        cands = list(self.cfg.windows)
        for li, layer in enumerate(self.attention_layers()):
            T = layer.last_seq_len or self.cfg.block_size
            wins = layer.executed_windows(T)
            idx = [cands.index(w) if w in cands else -1 for w in wins]
            decision = getattr(layer, "last_decision", None)
            raw = idx if decision is None or decision.raw_head_idx is None else decision.raw_head_idx.tolist()
            acr = coverage.acr(wins, T)
            for h, w in enumerate(wins):
                rows.append(
                    dict(
                        regime=self.cfg.regime,
                        layer_id=li,
                        head_id=h,
                        selected_window_idx=idx[h],
                        selected_window_size=int(w),
                        pre_clamp_window_idx=int(raw[h]),
                        final_window_idx=idx[h],
                        final_window_size=int(w),
                        ACR=acr,
                    )
                )
        return rows


def _make_layer(cfg: AAHConfig, index: int, like: nn.Module) -> nn.Module:
    if cfg.enabled:
        layer: nn.Module = AAHAttention(cfg, index, project=False)
    else:
        layer = CausalSelfAttention(cfg, index, window=layer_window(cfg, index), project=False)
    ref = next(like.parameters())
    return layer.to(device=ref.device)


def patch_model(
    model: nn.Module, regime: str = "full_adaptive", windows: Sequence[int] = PAPER_WINDOWS, **overrides: Any
) -> RetrofitHandle:
    """Patch every self-attention of ``model`` in place and return its ``RetrofitHandle``.

    ``regime`` is any regime of ``aah-viz regimes`` (``window=`` or the regime's own key sets the
    size of ``sliding_window``, ``local_global_layers`` and ``fixed_window``); ``overrides`` are
    config keys (e.g. ``attention_backend="dense_masked"``, ``block_size=...``).
    """
    return patch_with_config(model, retrofit_config(model, regime, windows, **overrides))


def patch_with_config(model: nn.Module, cfg: AAHConfig) -> RetrofitHandle:
    """Patch ``model`` with a given config (an adapter's); its shape must be the model's."""
    if getattr(model, HANDLE_ATTRIBUTE, None) is not None:
        raise ConfigError("the model is already patched; call model.aah_routing.unpatch() first")
    modules = attention_modules(model)
    n_q, _, head_dim = _heads(modules[0], model.config)
    if (cfg.n_layer, cfg.n_head, cfg.n_embd) != (len(modules), n_q, n_q * head_dim):
        raise ConfigError(
            f"config shape n_layer={cfg.n_layer}, n_head={cfg.n_head}, n_embd={cfg.n_embd} does not match the "
            f"model's {len(modules)} attention layers of {n_q} heads x {head_dim}"
        )
    for i, m in enumerate(modules):
        saved = m.__dict__.get("forward")  # an instance-level forward (e.g. an accelerate hook) to restore
        original = saved if saved is not None else types.MethodType(type(m).forward, m)
        m._aah_spec = _Spec(m, model.config, original)
        m._aah_saved_forward = saved
        m.aah = _make_layer(cfg, i, m)
        m.aah.train(m.training)
        m.forward = types.MethodType(_patched_forward, m)
    handle = RetrofitHandle(model, cfg, modules)
    object.__setattr__(model, HANDLE_ATTRIBUTE, handle)
    return handle


def routing_handle(model: Any) -> RetrofitHandle | None:
    """The handle of a patched model (also inside a DistributedDataParallel wrapper), else None."""
    inner = getattr(model, "module", model)
    return getattr(inner, HANDLE_ATTRIBUTE, None)
