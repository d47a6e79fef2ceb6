"""AAHTransformer: the GPT-2-style backbone of method §2 with AAH-v3 (or plain) attention.

Token + learned position embedding, dropout; pre-LayerNorm blocks (attention, then a GELU MLP);
final LayerNorm; LM head without bias, weight-tied to the token embedding; mean cross-entropy.
PyTorch default initialisation everywhere. Only the attention module changes between regimes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from aah_viz.errors import ConfigError
from instrumentation.attention import AAHAttention, CausalSelfAttention, SubscriptionHandle
from instrumentation.config import AAHConfig
from instrumentation.events import Subscriber


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


def layer_window(cfg: AAHConfig, layer_index: int) -> int | None:
    """The fixed window of a plain layer: None = full causal (baseline, or a global layer)."""
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


class AAHTransformer(nn.Module):
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

    def aah_layers(self) -> list[AAHAttention]:
        return [a for a in self.attention_layers() if isinstance(a, AAHAttention)]

    # ------------------------------------------------------------------ trainer interface (method §2, §8.6)
    def set_step(self, step: int | None) -> None:
        """Set the global training step on every layer (None = stand-alone inference)."""
        for a in self.attention_layers():
            a.set_step(step)

    def set_feature_reducer(self, fn) -> None:
        """Pass every routing input (per-head and pooled group features, method §4) through ``fn``.

        Data-parallel training uses it to average the features over ranks, so that every rank
        takes the same routing decisions; ``None`` removes it. Not a reference behaviour: the
        reference trains on one device.
        """
        for a in self.aah_layers():
            a.feature_reducer = fn

    def set_control(self, flag: bool) -> None:
        """``set_control`` on every AAH layer; False clears the control caches (method §8.6)."""
        for a in self.aah_layers():
            a.set_control(flag)

    def prepare_step(self, step: int | None) -> None:
        """What the reference trainer does before every training forward: set_step, then
        set_control(apply_window_control) (which makes "control off" rebuild routing every step)."""
        self.set_step(step)
        self.set_control(self.cfg.apply_window_control)

    def reset_routing_state(self) -> None:
        for a in self.aah_layers():
            a.reset_routing_state()

    @contextlib.contextmanager
    def _routing_mode_ctx(self, previous: list[bool]):
        try:
            yield self
        finally:
            for a, p in zip(self.aah_layers(), previous):
                a.eval_mutates_routing = p

    def routing_mode(self, mode: str):
        """``"frozen"``: evaluation forwards leave routing untouched (default); ``"mutate"``: they run
        the state machine and change routing like the reference (method §15.11).

        Takes effect at once; used as a context manager it restores the previous mode on exit.
        """
        if mode not in ("frozen", "mutate"):
            raise ConfigError(f"routing_mode: unknown mode {mode!r}; allowed values are frozen, mutate")
        previous = [a.eval_mutates_routing for a in self.aah_layers()]
        for a in self.aah_layers():
            a.eval_mutates_routing = mode == "mutate"
        return self._routing_mode_ctx(previous)

    # ------------------------------------------------------------------ routing readout
    def current_windows(self) -> torch.Tensor:
        """LongTensor [n_layer, n_head]: the window (tokens) each head executed in the last forward."""
        return torch.tensor([a.executed_windows() for a in self.attention_layers()], dtype=torch.long)

    def subscribe(self, fn: Subscriber) -> SubscriptionHandle:
        """Subscribe ``fn`` to the routing events of every attention layer; one handle detaches all."""
        handles = [a.subscribe(fn) for a in self.attention_layers()]
        return SubscriptionHandle([h.remove for h in handles])

    # ------------------------------------------------------------------ controller diagnostics (method §9)
    def controller_parameters(self) -> list[nn.Parameter]:
        """Controller, joint scorer and sibling-bias parameters of every AAH layer."""
        return [p for a in self.aah_layers() for p in a.routing_parameters()]

    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        ids = {id(p) for p in self.controller_parameters()}
        return (p for p in self.parameters() if id(p) not in ids)

    def controller_grad_norm(self) -> torch.Tensor:
        """L2 norm of the routing networks' gradients (0 when none has a gradient, the reference case)."""
        grads = [p.grad.detach().float().pow(2).sum() for p in self.controller_parameters() if p.grad is not None]
        if not grads:
            return torch.zeros(())
        return torch.stack(grads).sum().sqrt()

    def controller_initial_parameters(self) -> list[torch.Tensor]:
        return [t for a in self.aah_layers() for t in a.routing_initial_parameters()]

    def load_controller_initial_parameters(self, tensors: list[torch.Tensor]) -> None:
        """Restore the initial copies (e.g. from a checkpoint's ``controller_init``) for weight drift."""
        mine = self.controller_initial_parameters()
        if len(mine) != len(tensors):
            raise ConfigError(f"controller_init: expected {len(mine)} tensors, got {len(tensors)}")
        for dst, src in zip(mine, tensors):
            dst.copy_(src.to(dst.device, dst.dtype))

    def controller_weight_drift(self) -> dict[str, float]:
        """Distance of the routing networks from their initialisation: absolute L2 and relative to the init norm."""
        cur = self.controller_parameters()
        init = self.controller_initial_parameters()
        if not cur:
            return {"l2": 0.0, "relative": 0.0, "max_abs": 0.0}
        with torch.no_grad():
            d2 = sum(float((p.detach().float() - q.float()).pow(2).sum()) for p, q in zip(cur, init))
            n2 = sum(float(q.float().pow(2).sum()) for q in init)
            mx = max(float((p.detach().float() - q.float()).abs().max()) for p, q in zip(cur, init))
        return {"l2": d2**0.5, "relative": (d2**0.5) / max(n2**0.5, 1e-12), "max_abs": mx}

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
