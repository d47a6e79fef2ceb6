"""Attention sources for the probes: an AAH checkpoint or a Hugging Face model, run over texts.

Each source implements the duck-typed interface of ``aah_viz.probes.predict``:
``encode(text) -> (ids, offsets)``, ``max_len``, ``n_layer``, ``n_head``, ``windows`` and
``attend(batch) -> ndarray (B, n_layer, n_head, T, T)`` over the text tokens (sequences padded at
the end; a causal model's attention at a position does not depend on what follows it; a model's
special tokens are added inside ``attend`` and their rows and columns removed), and ``causal``:
whether a token sees only itself and earlier tokens (the probes then read every link looking back,
``aah_viz.probes.syntax_causal``).

    from instrumentation.measure.probe_extract import load_aah_checkpoint, HFAttentionSource
    source = load_aah_checkpoint("RUN/checkpoints/step-00000100.pt")
    att = source.attend([source.encode("The dog runs.")[0]])
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from aah_viz.corpus.tokenizer import ByteTokenizer
from aah_viz.errors import ConfigError, InputFormatError, RunLogError
from aah_viz.probes.alignment import word_segments


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

    causal = True  # AAH models are decoders: every window is a causal band

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
    from instrumentation.config import AAHConfig
    from instrumentation.model import AAHTransformer
    from instrumentation.training.checkpoint import load_checkpoint

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


def special_token_template(tokenizer) -> tuple[list[int], list[int]]:
    """The special token ids the tokenizer puts before and after a single text ([CLS] / [SEP] for
    BERT, <s> / </s> for RoBERTa, a BOS for Llama, nothing for GPT-2), read off one encoding."""
    if tokenizer is None:
        return [], []
    enc = tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
    ids, special = list(enc["input_ids"]), list(enc["special_tokens_mask"])
    text = [i for i, s in enumerate(special) if not s]
    if not text:
        return [], []
    return ids[: text[0]], ids[text[-1] + 1 :]


_CAUSAL_ARCHITECTURE = re.compile(r"(ForCausalLM|LMHeadModel)$")


def is_causal_model(model) -> bool:
    """Whether a Hugging Face model is a decoder (a token sees only itself and earlier tokens): a
    ``*ForCausalLM`` / ``*LMHeadModel`` class or ``config.architectures`` entry, ``config.is_decoder``,
    or an attention module that says ``is_causal`` (transformers sets it on Llama, GPT-2, Qwen, ...
    and on BERT only when it is configured as a decoder)."""
    cfg = getattr(model, "config", None)
    names = [type(model).__name__, *(getattr(cfg, "architectures", None) or [])]
    if any(_CAUSAL_ARCHITECTURE.search(str(name)) for name in names):
        return True
    if bool(getattr(cfg, "is_decoder", False)):
        return True
    return any(getattr(m, "is_causal", False) is True for m in model.modules())


def start_token(tokenizer, model, prefix: Sequence[int]) -> list[int]:
    """What goes before a causal model's text: the tokenizer's own special tokens when it adds any,
    else its BOS token (when the tokenizer has one inside the model's vocabulary).

    A decoder's first position collects much of every later row's attention (an attention sink);
    without a start token that first position is the text's first word, and the argmax of most
    heads would find it rather than a syntactic head. With one, the sink is a special token whose
    column is removed like [CLS]'s.
    """
    if prefix or tokenizer is None:
        return list(prefix)
    bos = getattr(tokenizer, "bos_token_id", None)
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    return [int(bos)] if bos is not None and 0 <= int(bos) < vocab else []


def position_limit(model, tokenizer=None) -> int:
    """Positions one input may use: max_position_embeddings less the offset some models add to
    positions (RoBERTa counts from padding_idx + 1), and the tokenizer's limit when it has one."""
    cfg = model.config
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 512
    embeddings = getattr(getattr(model, "base_model", model), "embeddings", None)
    padding_idx = getattr(getattr(embeddings, "position_embeddings", None), "padding_idx", None)
    if padding_idx is not None:
        limit -= int(padding_idx) + 1
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and 0 < tok_limit < 1_000_000:
        limit = min(limit, tok_limit)
    return int(limit)


class HFAttentionSource:
    """Any Hugging Face model that returns attentions (``output_attentions=True``).

    Tokens and their character offsets come from a fast tokenizer when one is given (or found
    next to the model); otherwise from the byte tokenizer, whose ids must fit the vocabulary.
    Every input gets the special tokens the tokenizer adds ([CLS] ... [SEP] for BERT): the model
    sees what it was trained on; a causal model whose tokenizer adds none gets its BOS token in
    front (``start_token``; ``with_start_token=False`` leaves it out). Their rows and columns are
    removed from the attention returned, so rows sum to the share of attention the text tokens
    receive. ``max_len`` is the number of text tokens one input takes: the position limit less the
    special tokens. ``causal`` comes from the model (``is_causal_model``).
    """

    def __init__(
        self,
        model,
        tokenizer=None,
        max_len: int | None = None,
        device: str = "cpu",
        with_start_token: bool = True,
    ):
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
        routing = getattr(model, "aah_routing", None)
        self.candidate_windows: tuple[int, ...] = tuple(routing.cfg.windows) if routing is not None else ()
        self.step = None
        self.tokenizer = tokenizer if tokenizer is not None and getattr(tokenizer, "is_fast", False) else None
        self.byte_tokenizer = ByteTokenizer() if self.tokenizer is None else None
        if self.byte_tokenizer is not None and int(getattr(cfg, "vocab_size", 0)) < 256:
            raise ConfigError(f"model vocab_size {cfg.vocab_size} is below 256 and no fast tokenizer was given")
        self.causal = is_causal_model(model)
        self.prefix, self.suffix = special_token_template(self.tokenizer)
        if self.causal and with_start_token:
            self.prefix = start_token(self.tokenizer, model, self.prefix)
        self.n_special = len(self.prefix) + len(self.suffix)
        limit = position_limit(model, self.tokenizer) - self.n_special
        if limit < 2:
            raise ConfigError(f"the model takes {limit + self.n_special} positions, too few for its special tokens")
        self.max_len = int(min(max_len or limit, limit))
        self.pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0) if tokenizer is not None else 0

    @property
    def windows(self) -> np.ndarray:
        """Each head's window: a patched model's executed windows, else the whole input."""
        routing = getattr(self.model, "aah_routing", None)
        if routing is not None:
            return routing.current_windows().cpu().numpy().astype(np.int64)
        return np.full((self.n_layer, self.n_head), self.max_len, dtype=np.int64)

    def encode(self, text: str):
        """Text tokens and their character offsets, without special tokens (``attend`` adds them)."""
        if self.tokenizer is None:
            return self.byte_tokenizer.encode(text)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def encode_words(self, text: str, word_spans: list[tuple[int, int]]):
        """Like ``encode``, but tokenised word by word (``word_segments``): no token crosses a word."""
        if self.tokenizer is None:
            return self.byte_tokenizer.encode(text)
        segments = word_segments(text, word_spans)
        if not segments:
            return [], []
        enc = self.tokenizer([text[a:b] for a, b in segments], add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = [], []
        for (a, _), seg_ids, seg_offsets in zip(segments, enc["input_ids"], enc["offset_mapping"]):
            ids += list(seg_ids)
            offsets += [(a + s, a + e) for s, e in seg_offsets]
        return ids, offsets

    def forward(self, batch: Sequence[Sequence[int]]):
        """The model's outputs (attentions included) on the batch with its special tokens added."""
        wrapped = [self.prefix + list(ids) + self.suffix for ids in batch]
        idx, mask = _pad(wrapped, self.pad_id)
        return self.model(input_ids=idx.to(self.device), attention_mask=mask.to(self.device), output_attentions=True)

    @torch.no_grad()
    def attend(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        """(B, n_layer, n_head, T, T) attention among the text tokens (special tokens' rows and columns removed)."""
        out = self.forward(batch)
        if not getattr(out, "attentions", None):
            raise ConfigError("the model returned no attentions; load it with attn_implementation='eager'")
        att = torch.stack(list(out.attentions), dim=1).float()  # (B, L, H, T + specials, T + specials)
        T = max(len(ids) for ids in batch)
        p = len(self.prefix)
        result = torch.zeros(att.shape[:3] + (T, T), dtype=att.dtype)
        for b, ids in enumerate(batch):
            n = len(ids)
            result[b, :, :, :n, :n] = att[b, :, :, p : p + n, p : p + n]
        return result.cpu().numpy()


def _from_pretrained(auto_class, path, **kwargs):
    """``from_pretrained`` on a local folder; a refused pickle or unreadable folder is one line."""
    from instrumentation.training.checkpoint import refusal

    try:
        return auto_class.from_pretrained(path, local_files_only=True, **kwargs)
    except Exception as err:  # noqa: BLE001 - transformers raises many kinds; each becomes one line
        refused = refusal(path, err)
        if refused:
            raise RunLogError(refused) from None
        if isinstance(err, (OSError, ValueError)):
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise InputFormatError(f"cannot load the model in {path}: {first}") from err
        raise


def load_retrofit_adapter(
    adapter, run_dir, device: str = "cpu", with_start_token: bool = True, base_model=None
) -> HFAttentionSource:
    """A run of ``aah-viz retrofit``: its base model (the manifest's ``base_model``, or ``base_model``
    where the folder has moved) with one of its adapters, probed as patched (routing frozen as saved)."""
    from aah_viz.runlog import read_manifest
    from instrumentation.retrofit import load_adapter
    from instrumentation.retrofit.load import load_causal_lm, run_base_model

    base = run_base_model(run_dir, read_manifest(run_dir), base_model)
    model = load_causal_lm(base, device)
    load_adapter(model, adapter)
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    return HFAttentionSource(model, tokenizer, device=device, with_start_token=with_start_token)


def load_hf_model(
    path, max_len: int | None = None, device: str = "cpu", with_start_token: bool = True
) -> HFAttentionSource:
    """A local Hugging Face model folder (config.json and weights); nothing is downloaded."""
    try:
        from transformers import AutoModel, AutoTokenizer
    except ImportError as err:  # pragma: no cover - the hf extra is installed here
        from aah_viz.errors import MissingDependencyError

        raise MissingDependencyError("Hugging Face models need transformers: pip install 'aah-viz[hf]'") from err
    path = Path(path)
    if not (path / "config.json").is_file():
        raise InputFormatError(f"{path} has no config.json; give a local Hugging Face model folder")
    model = _from_pretrained(AutoModel, path, attn_implementation="eager")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    return HFAttentionSource(model, tokenizer, max_len=max_len, device=device, with_start_token=with_start_token)
