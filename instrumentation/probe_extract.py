"""Attention sources for the probes: an AAH checkpoint or a Hugging Face model, run over texts.

Each source implements the duck-typed interface of ``aah_viz.probes.predict``:
``encode(text) -> (ids, offsets)``, ``max_len``, ``n_layer``, ``n_head``, ``windows`` and
``attend(batch) -> ndarray (B, n_layer, n_head, T, T)`` (sequences padded at the end; a causal
model's attention at a position does not depend on what follows it).

    from instrumentation.probe_extract import load_aah_checkpoint, HFAttentionSource
    source = load_aah_checkpoint("RUN/checkpoints/step-00000100.pt")
    att = source.attend([source.encode("The dog runs.")[0]])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from aah_viz.corpus.tokenizer import ByteTokenizer
from aah_viz.errors import ConfigError, InputFormatError, RunLogError


def _pad(batch: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    if not batch:
        raise ValueError("attend needs at least one sequence")
    T = max(len(ids) for ids in batch)
    idx = torch.full((len(batch), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), T), dtype=torch.long)
    for i, ids in enumerate(batch):
        idx[i, : len(ids)] = torch.as_tensor(list(ids), dtype=torch.long)
        mask[i, : len(ids)] = 1
    return idx, mask


class AAHAttentionSource:
    """An ``AAHTransformer`` in eval mode with its routing state as checkpointed (frozen)."""

    def __init__(self, model, step: int | None = None, device: str = "cpu"):
        self.model = model.to(device).eval()
        self.device = device
        self.step = step
        cfg = model.cfg
        self.n_layer, self.n_head, self.max_len = int(cfg.n_layer), int(cfg.n_head), int(cfg.block_size)
        self.candidate_windows = tuple(int(w) for w in cfg.windows)
        self.tokenizer = ByteTokenizer()
        if int(cfg.vocab_size) < self.tokenizer.vocab_size:
            raise ConfigError(f"the model's vocab_size {cfg.vocab_size} is below the byte tokenizer's 256")
        self._windows: np.ndarray | None = None

    def encode(self, text: str):
        return self.tokenizer.encode(text)

    @property
    def windows(self) -> np.ndarray:
        """(n_layer, n_head) executed windows in tokens (after at least one forward: the routing state's)."""
        if self._windows is None:
            with torch.no_grad():
                self.model(torch.zeros((1, self.max_len), dtype=torch.long, device=self.device))
            self._windows = self.model.current_windows().cpu().numpy().astype(np.int64)
        return self._windows

    @torch.no_grad()
    def attend(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        idx, _ = _pad(batch)
        with self.model.routing_mode("frozen"):
            out = self.model(idx.to(self.device), return_attentions=True)
        return torch.stack(out.attentions, dim=1).float().cpu().numpy()  # (B, L, H, T, T)


def load_aah_checkpoint(path, device: str = "cpu") -> AAHAttentionSource:
    """A checkpoint written by ``aah-viz train``, loaded with ``weights_only=True``."""
    from instrumentation.checkpoint import load_checkpoint
    from instrumentation.config import AAHConfig
    from instrumentation.model import AAHTransformer

    path = Path(path)
    if not path.is_file():
        raise RunLogError(f"checkpoint {path} does not exist; give RUN/checkpoints/step-XXXXXXXX.pt or a run directory")
    payload = load_checkpoint(path, map_location=device)
    cfg = AAHConfig.from_dict(payload["config"])
    model = AAHTransformer(cfg)
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as err:
        raise RunLogError(
            f"checkpoint {path} does not fit its own config ({err}); it is damaged or from another version"
        ) from None
    model.set_step(None)
    return AAHAttentionSource(model, step=int(payload["step"]), device=device)


class HFAttentionSource:
    """Any Hugging Face model that returns attentions (``output_attentions=True``).

    Tokens and their character offsets come from a fast tokenizer when one is given (or found
    next to the model); otherwise from the byte tokenizer, whose ids must fit the vocabulary.
    """

    def __init__(self, model, tokenizer=None, max_len: int | None = None, device: str = "cpu"):
        if hasattr(model, "set_attn_implementation"):  # fused kernels return no attention probabilities
            try:
                model.set_attn_implementation("eager")
            except (ValueError, ImportError, AttributeError):
                pass
        self.model = model.to(device).eval()
        self.device = device
        cfg = model.config
        self.n_layer = int(getattr(cfg, "num_hidden_layers", None) or cfg.n_layer)
        self.n_head = int(getattr(cfg, "num_attention_heads", None) or cfg.n_head)
        limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 512
        self.max_len = int(min(max_len or limit, limit))
        self.candidate_windows: tuple[int, ...] = ()
        self.step = None
        self.tokenizer = tokenizer if tokenizer is not None and getattr(tokenizer, "is_fast", False) else None
        self.byte_tokenizer = ByteTokenizer() if self.tokenizer is None else None
        if self.byte_tokenizer is not None and int(getattr(cfg, "vocab_size", 0)) < 256:
            raise ConfigError(f"model vocab_size {cfg.vocab_size} is below 256 and no fast tokenizer was given")
        self.pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0) if tokenizer is not None else 0

    @property
    def windows(self) -> np.ndarray:
        return np.full((self.n_layer, self.n_head), self.max_len, dtype=np.int64)

    def encode(self, text: str):
        if self.tokenizer is None:
            return self.byte_tokenizer.encode(text)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    @torch.no_grad()
    def attend(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        idx, mask = _pad(batch, self.pad_id)
        out = self.model(input_ids=idx.to(self.device), attention_mask=mask.to(self.device), output_attentions=True)
        if not getattr(out, "attentions", None):
            raise ConfigError("the model returned no attentions; load it with attn_implementation='eager'")
        return torch.stack(list(out.attentions), dim=1).float().cpu().numpy()


def load_hf_model(path, max_len: int | None = None, device: str = "cpu") -> HFAttentionSource:
    """A local Hugging Face model folder (config.json and weights); nothing is downloaded."""
    try:
        from transformers import AutoModel, AutoTokenizer
    except ImportError as err:  # pragma: no cover - the hf extra is installed here
        from aah_viz.errors import MissingDependencyError

        raise MissingDependencyError("Hugging Face models need transformers: pip install 'aah-viz[hf]'") from err
    path = Path(path)
    if not (path / "config.json").is_file():
        raise InputFormatError(f"{path} has no config.json; give a local Hugging Face model folder")
    model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    return HFAttentionSource(model, tokenizer, max_len=max_len, device=device)
