"""AAH head groups for a pretrained model that routes nothing, so that its probes can be compared
with groups on both sides of real heads.

Each head gets the project's 9-D routing feature (``routing.features.head_features``: mean |x| and
standard deviation of its q, k and v activations over the text tokens; the last three columns, a
routed model's previous entropy, norm and usage, are zero) and each layer's heads are clustered
by the project's hierarchy build with the default thresholds (``AAHConfig``). Levels that repeat
the level below are dropped. Works for BERT-family encoders (``encoder.layer[i].attention.self``
with ``query``, ``key`` and ``value`` projections: BERT, RoBERTa, MiniLM, ...) and for decoders
with ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` (Llama, Mistral, Qwen2, Qwen3).

A decoder's heads are its *query* heads, taken as ``aah-viz retrofit`` patches them: q and k after
the model's own q/k norms and rotary positions, and under grouped-query attention each key/value
head repeated to the query heads it serves (as the model's ``repeat_kv`` does). The query heads of
one key/value head therefore share their k and v columns and differ only in q. Moments are
accumulated over the batches in float64 (a 30-layer model's activations are not all kept).

    features = qkv_head_features(model, tokenizer, sentences)      # (n_layer, n_head, 9)
    groups = head_group_labels(features)                            # per layer: levels, origin
    heads, validity = group_tables(features, groups, window=510)    # rows for a run's tables
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from aah_viz.errors import ConfigError
from instrumentation.config import AAHConfig
from instrumentation.routing.clustering import labels_from_groups
from instrumentation.routing.features import head_features
from instrumentation.routing.hierarchy import build_hierarchy

DECODER_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def encoder_attention_blocks(model) -> list:
    """The self-attention modules of a BERT-family encoder in layer order (``ConfigError`` for other models)."""
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    blocks = [getattr(getattr(layer, "attention", None), "self", None) for layer in layers or []]
    if not blocks or any(not all(hasattr(b, n) for n in ("query", "key", "value")) for b in blocks):
        raise ConfigError(
            f"{type(model).__name__} has no encoder.layer[i].attention.self query/key/value projections "
            "and no q_proj/k_proj/v_proj/o_proj attention (a BERT-family encoder or a Llama-family decoder "
            "is needed for Q/K/V head groups)"
        )
    return blocks


def _decoder_blocks(model) -> list:
    """The self-attention modules of a Llama-family decoder in layer order (empty for other models)."""
    return [
        m for m in model.modules() if all(isinstance(getattr(m, p, None), torch.nn.Module) for p in DECODER_PROJECTIONS)
    ]


@torch.no_grad()
def qkv_head_features(model, tokenizer, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """(n_layer, n_head, 9) head features from the q, k, v activations of every text token (special
    tokens included, padding left out), each text encoded as the tokenizer encodes it. A decoder's
    heads are its query heads (see the module's docstring)."""
    if _decoder_blocks(model):
        return _decoder_features(model, tokenizer, texts, batch_size)
    blocks = encoder_attention_blocks(model)
    cfg = model.config
    n_head = int(cfg.num_attention_heads)
    d = int(cfg.hidden_size) // n_head
    kept: dict[tuple[int, int], list[torch.Tensor]] = {}
    mask: dict[str, torch.Tensor] = {}

    def keeper(layer: int, which: int):
        def hook(_module, _inputs, output):
            kept.setdefault((layer, which), []).append(output[mask["valid"]].float())

        return hook

    hooks = [
        getattr(block, name).register_forward_hook(keeper(layer, which))
        for layer, block in enumerate(blocks)
        for which, name in enumerate(("query", "key", "value"))
    ]
    try:
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[i : i + batch_size]), padding=True, truncation=True, return_tensors="pt")
            mask["valid"] = enc["attention_mask"].bool()
            model(**{k: v.to(model.device) for k, v in enc.items()})
    finally:
        for hook in hooks:
            hook.remove()
    if not kept:
        raise ConfigError("no text to compute head features from")
    out = []
    for layer in range(len(blocks)):
        q, k, v = (torch.cat(kept[(layer, w)]).reshape(1, -1, n_head, d).transpose(1, 2) for w in range(3))
        out.append(head_features(q, k, v).cpu().numpy())
    return np.stack(out)


class _Moments:
    """Running per-head sums of |x|, x and x^2 (float64), for mean |x| and the unbiased std."""

    def __init__(self, n_heads: int):
        self.n = 0
        self.abs, self.sum, self.squares = (torch.zeros(n_heads, dtype=torch.float64) for _ in range(3))

    def add(self, x: torch.Tensor) -> None:
        """``x``: (N, H, D) the activations of N tokens."""
        x = x.double()
        self.n += x.shape[0] * x.shape[2]
        self.abs += x.abs().sum(dim=(0, 2))
        self.sum += x.sum(dim=(0, 2))
        self.squares += (x * x).sum(dim=(0, 2))

    def features(self) -> torch.Tensor:
        """(H, 2) mean |x| and unbiased std."""
        mean = self.sum / self.n
        var = (self.squares - self.n * mean * mean) / max(self.n - 1, 1)
        return torch.stack([self.abs / self.n, var.clamp_min(0).sqrt()], dim=1)


def _decoder_qkv(module, hidden: torch.Tensor, position_embeddings) -> tuple[torch.Tensor, ...]:
    """(B, T, H, D) q and k after the module's norms and rotary positions, and v (k and v per key/value head)."""
    B, T, _ = hidden.shape
    head_dim = int(getattr(module, "head_dim", 0) or module.o_proj.in_features // module.config.num_attention_heads)
    q = module.q_proj(hidden).view(B, T, -1, head_dim)
    k = module.k_proj(hidden).view(B, T, -1, head_dim)
    v = module.v_proj(hidden).view(B, T, -1, head_dim)
    if getattr(module, "q_norm", None) is not None:
        q, k = module.q_norm(q), module.k_norm(k)
    rotary = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb", None)
    if rotary is None or position_embeddings is None:
        raise ConfigError(f"{type(module).__name__}: no rotary positions to apply (apply_rotary_pos_emb)")
    cos, sin = position_embeddings
    q, k = rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    return q.transpose(1, 2), k.transpose(1, 2), v


def _decoder_features(model, tokenizer, texts: Sequence[str], batch_size: int) -> np.ndarray:
    blocks = _decoder_blocks(model)
    moments: dict[tuple[int, int], _Moments] = {}
    state: dict[str, torch.Tensor] = {}

    def keeper(layer: int):
        def hook(module, args, kwargs):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            valid = state["valid"]
            for which, x in enumerate(_decoder_qkv(module, hidden, kwargs.get("position_embeddings"))):
                kept = x[valid].float()  # (N, H, D): text tokens only, padding left out
                moments.setdefault((layer, which), _Moments(kept.shape[1])).add(kept)

        return hook

    hooks = [block.register_forward_pre_hook(keeper(i), with_kwargs=True) for i, block in enumerate(blocks)]
    side = getattr(tokenizer, "padding_side", "right")
    try:
        tokenizer.padding_side = "right"  # padding after the text: a causal model's text tokens never see it
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[i : i + batch_size]), padding=True, truncation=True, return_tensors="pt")
            state["valid"] = enc["attention_mask"].bool()
            model(**{k: v.to(model.device) for k, v in enc.items()}, use_cache=False)
    finally:
        tokenizer.padding_side = side
        for hook in hooks:
            hook.remove()
    if not moments:
        raise ConfigError("no text to compute head features from")
    out = []
    for layer in range(len(blocks)):
        q, k, v = (moments[(layer, w)].features() for w in range(3))
        groups = q.shape[0] // k.shape[0]  # query heads per key/value head
        kv = torch.cat([k, v], dim=1).repeat_interleave(groups, dim=0)  # each query head: its key/value head's
        base = torch.cat([q, kv], dim=1)  # mean|q|, std q, mean|k|, std k, mean|v|, std v
        out.append(torch.cat([base, torch.zeros(q.shape[0], 3, dtype=base.dtype)], dim=1).float().numpy())
    return np.stack(out)


@dataclass(frozen=True)
class LayerGroups:
    levels: list[list[int]]  # per level (level 0 first): every head's group
    origin: str  # how level 0 came about: natural, forced_bipartition, collapsed, ...


def head_group_labels(features: np.ndarray, cfg: AAHConfig | None = None) -> list[LayerGroups]:
    """Per layer: every head's group per level, from the default hierarchy build."""
    cfg = cfg or AAHConfig()
    out = []
    for layer_features in features:
        hierarchy = build_hierarchy(
            torch.from_numpy(np.ascontiguousarray(layer_features, dtype=np.float32)),
            sim_threshold=cfg.sim_threshold,
            super_threshold=cfg.super_threshold,
            max_depth=cfg.max_depth,
            upper_metric=cfg.upper_cluster_metric,
            normdiff_scale=cfg.cosine_normdiff_scale,
            min_group_size=cfg.min_group_size,
            group_feature_mode=cfg.group_feature_mode,
            upper_l2_threshold=cfg.upper_l2_threshold,
        )
        n_heads = layer_features.shape[0]
        levels = [labels_from_groups(hierarchy.levels[0].groups, n_heads)]
        for parent in hierarchy.parent_maps():
            above = [parent[g] for g in levels[-1]]
            if len(set(above)) == len(set(levels[-1])):
                break  # the same partition again: nothing new above it
            levels.append(above)
        facts = hierarchy.levels[0].facts
        out.append(LayerGroups(levels, facts.origin if facts is not None else "natural"))
    return out


def group_tables(
    features: np.ndarray, groups: list[LayerGroups], window: int, step: int = 0, cfg: AAHConfig | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows of the run's ``heads`` table (every head at ``window``, its group per level) and of its
    ``cluster_validity`` table (level 0 of each layer judged against its nulls)."""
    from aah_viz.analysis.cluster_validity import partition_row

    cfg = cfg or AAHConfig()
    depth = max(len(g.levels) for g in groups)
    heads, validity = [], []
    for layer, layer_groups in enumerate(groups):
        levels = layer_groups.levels
        for head in range(features.shape[1]):
            row = {"step": step, "layer": layer, "head": head, "window_idx": 0, "window": window, "raw_idx": 0}
            row.update({f"group_l{lv}": levels[lv][head] if lv < len(levels) else None for lv in range(depth)})
            heads.append(row)
        validity.append(
            partition_row(
                step, layer, features[layer], levels[0], threshold=cfg.sim_threshold, origin=layer_groups.origin
            )
        )
    frame = pd.DataFrame(heads)
    for lv in range(depth):
        frame[f"group_l{lv}"] = frame[f"group_l{lv}"].astype("Int16")
    return frame, pd.DataFrame(validity)
