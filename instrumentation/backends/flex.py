"""FlexAttention backend: one call for all heads with a per-head sliding-window block mask.

The mask predicate is "key <= query and query - key < W_h" (or, with ``sinks`` k, "key < k": the
first positions every query keeps, method §10.4) with the per-head windows in a tensor, so heads
with different windows share one kernel launch and the kernel skips every block outside a head's
band. Compiled with ``torch.compile`` (on CPU this needs a C++
compiler; FlexAttention has no CPU backward and no attention dropout anywhere, so those
settings fall back to ``banded``). Head statistics come from the returned log-sum-exp and a
second call with the keys as values (-sum P ln P = lse - scale q . (P K)).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from .banded import fallback_to_banded
from .result import AttentionResult, HeadStats
from .stats import entropy_normaliser
from .windows import causal_pairs, clamp_window, normalise_windows

NAME = "flex"
BLOCK_SIZE = 128
_MASK_CACHE_SIZE = 32
_block_masks: OrderedDict[tuple, object] = OrderedDict()
_compiled = {}
_lock = threading.Lock()
_runtime_failure: dict[str, str] = {}  # device type -> reason, once a compiled call failed


def _flex_module():
    try:
        from torch.nn.attention import flex_attention as module
    except ImportError:
        return None
    return module


def unavailable_reason(*, device=None, training: bool = False, dropout_p: float = 0.0) -> str | None:
    """Why flex cannot run in this setting, or None."""
    if _flex_module() is None:
        return "torch.nn.attention.flex_attention is not available in this PyTorch"
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type not in ("cpu", "cuda"):
        return f"FlexAttention does not run on device type {dev.type!r}"
    if training and dropout_p > 0.0:
        return "FlexAttention has no attention dropout (training with dropout_p > 0)"
    if training and dev.type == "cpu":
        return "FlexAttention has no CPU backward (training on CPU)"
    if dev.type in _runtime_failure:
        return _runtime_failure[dev.type]
    return None


def _compiled_flex():
    module = _flex_module()
    with _lock:
        fn = _compiled.get("flex")
        if fn is None:
            fn = torch.compile(module.flex_attention, dynamic=False)
            _compiled["flex"] = fn
    return fn


def band_predicate(win: torch.Tensor, sinks: int = 0):
    """FlexAttention's ``mask_mod``: key <= query and (query - key < W_h, or key < ``sinks``)."""

    def sliding_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < win[h])

    def sliding_window_with_sinks(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & ((q_idx - kv_idx < win[h]) | (kv_idx < sinks))

    return sliding_window_with_sinks if sinks else sliding_window


def block_mask_for(windows: list[int], seq_len: int, device, block_size: int = BLOCK_SIZE, sinks: int = 0):
    """The (cached) block mask of per-head trailing causal bands, each with the first ``sinks`` keys."""
    module = _flex_module()
    device = torch.device(device)
    key = (tuple(windows), seq_len, device.type, device.index, block_size, int(sinks))
    with _lock:
        mask = _block_masks.get(key)
        if mask is not None:
            _block_masks.move_to_end(key)
            return mask
    mask = module.create_block_mask(
        band_predicate(torch.as_tensor(windows, dtype=torch.long, device=device), sinks),
        B=None,
        H=len(windows),
        Q_LEN=seq_len,
        KV_LEN=seq_len,
        device=device,
        BLOCK_SIZE=block_size,
    )
    with _lock:
        _block_masks[key] = mask
        while len(_block_masks) > _MASK_CACHE_SIZE:
            _block_masks.popitem(last=False)
    return mask


def block_mask_work(mask, seq_len: int, n_heads: int, block_size: int = BLOCK_SIZE) -> float:
    """Score elements in the blocks the kernel visits, over those of full causal attention."""
    blocks = mask.kv_num_blocks.sum().item()
    if getattr(mask, "full_kv_num_blocks", None) is not None:
        blocks += mask.full_kv_num_blocks.sum().item()
    return blocks * block_size * block_size / (n_heads * causal_pairs(seq_len))


def flex_attention_backend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows,
    *,
    dropout_p: float = 0.0,
    training: bool = False,
    need_stats: bool = False,
    scale: float | None = None,
    sinks: int = 0,
) -> AttentionResult:
    batch, n_heads, seq_len, head_dim = q.shape
    wins = [clamp_window(w, seq_len) for w in normalise_windows(windows, n_heads)]
    sinks = max(0, int(sinks))
    kwargs = dict(dropout_p=dropout_p, training=training, need_stats=need_stats, scale=scale, sinks=sinks)
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    reason = unavailable_reason(device=q.device, training=training or grad, dropout_p=dropout_p if training else 0.0)
    if reason is not None:
        return fallback_to_banded("flex", reason, q, k, v, windows, **kwargs)
    if need_stats and q.device.type == "cpu":
        reason = "compiled FlexAttention on CPU returns no log-sum-exp for head statistics"
        return fallback_to_banded("flex", reason, q, k, v, windows, **kwargs)
    scale_value = head_dim**-0.5 if scale is None else float(scale)
    if not grad:  # compiled CPU flex refuses inputs that require grad, even under no_grad
        q, k, v = q.detach(), k.detach(), v.detach()
    try:
        mask = block_mask_for(wins, seq_len, q.device, sinks=sinks)
        fn = _compiled_flex()
        stats = None
        if not need_stats:
            out = fn(q, k, v, block_mask=mask, scale=scale_value)
        else:
            out, lse = fn(q, k, v, block_mask=mask, scale=scale_value, return_lse=True)
            with torch.no_grad():
                pk = fn(q, k, k, block_mask=mask, scale=scale_value)
                stats = _stats(q, k, out, pk, lse, scale_value, seq_len)
    except Exception as err:  # compile or kernel failure: remember it, run banded instead
        reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
        _runtime_failure[q.device.type] = reason
        return fallback_to_banded("flex", reason, q, k, v, windows, **kwargs)
    work = block_mask_work(mask, seq_len, n_heads)
    return AttentionResult(out=out, stats=stats, realised_work=work, backend=NAME)


def _stats(q, k, out, pk, lse, scale, seq_len) -> HeadStats:
    """Method 11.2 statistics from the log-sum-exp: no probability matrix is formed."""
    qf, lse = q.detach().float(), lse.detach().float()
    rows = lse - scale * (qf * pk.detach().float()).sum(-1)  # (B, H, T) row entropies
    entropy = rows.mean(dim=(0, 2)) / entropy_normaliser(seq_len)
    norm = torch.linalg.vector_norm(out.detach().float(), dim=-1).mean(dim=(0, 2))
    diag = scale * (qf[:, :, -1] * k.detach().float()[:, :, -1]).sum(-1)  # (B, H)
    usage = torch.exp(diag - lse[:, :, -1]).sum(0) / (q.shape[0] * seq_len)
    return HeadStats(entropy=entropy, norm=norm, usage=usage)
