"""The trainer interface of a model whose attention layers are AAH-v3 (or plain) layers.

``RoutedLayers`` is mixed into ``AAHTransformer`` and into the handle of a patched Hugging Face
model (``instrumentation.retrofit``): both expose the same calls to a training loop, the recorder
and the integrations. A class using it provides ``cfg`` (an ``AAHConfig``) and
``attention_layers()`` (its ``AAHAttention`` / ``CausalSelfAttention`` modules, in layer order).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from aah_viz.errors import ConfigError
from instrumentation.attention import AAHAttention, SubscriptionHandle
from instrumentation.events import Subscriber


class RoutedLayers:
    """Step, control, routing mode, windows, subscriptions and controller diagnostics over all layers."""

    def attention_layers(self) -> list[nn.Module]:
        raise NotImplementedError

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

    def controller_grad_norm(self) -> torch.Tensor:
        """L2 norm of the routing networks' gradients (0 when none has a gradient, the reference case)."""
        return grad_norm(self.controller_parameters())

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
        l2 = float(weight_drift(cur, init))
        with torch.no_grad():
            n2 = sum(float(q.float().pow(2).sum()) for q in init)
            mx = max(float((p.detach().float() - q.float()).abs().max()) for p, q in zip(cur, init))
        return {"l2": l2, "relative": l2 / max(n2**0.5, 1e-12), "max_abs": mx}


# ---------------------------------------------------------------------- the routing networks' health
# One implementation for the model's methods and the recorder's per-step scalars: device tensors,
# so a training step never waits for the accelerator to read them.
def grad_norm(params: list[nn.Parameter]) -> torch.Tensor:
    """L2 norm over every gradient of ``params`` (a zero tensor when none has one)."""
    grads = [p.grad.detach() for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


@torch.no_grad()
def weight_drift(params: list[nn.Parameter], reference: list[torch.Tensor]) -> torch.Tensor:
    """L2 distance of ``params`` from ``reference`` (same shapes, same devices), over all of them."""
    if not params:
        return torch.zeros(())
    diffs = torch._foreach_sub([p.detach() for p in params], list(reference))
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(diffs)))
