"""AAHTransformer: the GPT-2-style backbone of method §2 with AAH-v3 (or plain) attention.

Token + learned position embedding, dropout; pre-LayerNorm blocks (attention, then a GELU MLP);
final LayerNorm; LM head without bias, weight-tied to the token embedding; mean cross-entropy.
PyTorch default initialisation everywhere. Only the attention module changes between regimes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from aah_viz.errors import ConfigError
from instrumentation.attention import AAHAttention, CausalSelfAttention
from instrumentation.config import AAHConfig
from instrumentation.routed_layers import RoutedLayers


@dataclass
class ModelOutput:
    logits: torch.Tensor  # (B, T, vocab)
    loss: torch.Tensor | None = None  # mean cross-entropy when targets were given
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, T) when asked for


class MLP(nn.Module):
    def __init__(self, cfg: AAHConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.n_ff, bias=cfg.bias)
        self.gelu = nn.GELU()  # exact (erf) GELU
        self.c_proj = nn.Linear(cfg.n_ff, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


def layer_window(cfg: AAHConfig, layer_index: int) -> int | tuple[int, ...] | None:
    """The fixed window of a plain layer: None = full causal (baseline, or a global layer); a tuple
    gives each head its own (``static_head_windows``)."""
    if cfg.static_head_windows:
        return tuple(cfg.static_head_windows[layer_index])
    if not cfg.static_window:
        return None
    if cfg.global_every and (layer_index + 1) % cfg.global_every == 0:
        return None
    return int(cfg.static_window)


class Block(nn.Module):
    def __init__(self, cfg: AAHConfig, layer_index: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        if cfg.enabled:
            self.attn: nn.Module = AAHAttention(cfg, layer_index)
        else:
            self.attn = CausalSelfAttention(cfg, layer_index, window=layer_window(cfg, layer_index))
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, need_probs: bool = False):
        a, probs = self.attn(self.ln_1(x), need_probs=need_probs)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, probs


class AAHTransformer(RoutedLayers, nn.Module):
    """GPT backbone whose attention layers are AAH-v3 layers (or plain causal ones)."""

    def __init__(self, cfg: AAHConfig):
        super().__init__()
        if not isinstance(cfg, AAHConfig):
            raise ConfigError(f"AAHTransformer needs an AAHConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (method §2.5)

    # ------------------------------------------------------------------ forward
    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, return_attentions: bool = False
    ) -> ModelOutput:
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ConfigError(
                f"input length {T} exceeds block_size={self.cfg.block_size}; "
                f"pass sequences of at most {self.cfg.block_size} tokens"
            )
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        attentions = [] if return_attentions else None
        for block in self.h:
            x, probs = block(x, need_probs=return_attentions)
            if attentions is not None:
                attentions.append(probs)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return ModelOutput(logits=logits, loss=loss, attentions=attentions)

    # ------------------------------------------------------------------ layers
    def attention_layers(self) -> list[nn.Module]:
        return [block.attn for block in self.h]

    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        ids = {id(p) for p in self.controller_parameters()}
        return (p for p in self.parameters() if id(p) not in ids)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def model_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits of an ``AAHTransformer`` or a Hugging Face causal LM (run without a KV cache)."""
    if isinstance(model, AAHTransformer):
        return model(x).logits
    return model(input_ids=x, use_cache=False).logits
