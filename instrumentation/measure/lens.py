"""``aah-viz lens``: a few documents through a run's model, recorded token by token.

Each document runs twice, as ``aah-viz profile`` runs its blocks: once routed (routing frozen, as
evaluation runs it: the windows each head executes on this document), and once with every
attention layer at full causal attention. From the full-attention probabilities the rows of
``attention_samples`` are built (``aah_viz.analysis.lens.attention_rows``): each query's strongest
keys, the mass its executed window cuts and the mass on the first token. Beside them, the tokens
(``lens_tokens``) and the gold links of probe data mapped onto tokens (``lens_links``).

A run of ``aah-viz train`` reads bytes (no start token); a run of ``aah-viz retrofit`` reads with its
base model's tokenizer and, as the model was trained, its BOS token first.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from aah_viz.analysis.lens import DEFAULT_TOP_K, attention_rows
from aah_viz.errors import ConfigError
from aah_viz.probes.alignment import align_words
from aah_viz.probes.lens_docs import LensDoc
from aah_viz.probes.lens_progress import TABLES, LensInterrupted, LensProgress, lens_digest
from aah_viz.stop import StopRequest
from instrumentation.measure.evaluation import Loaded
from instrumentation.measure.profile import full_attention
from instrumentation.model import model_logits

LENS_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # as the probe's: Ctrl-C keeps the finished documents
SINK_POSITIONS = 1  # the first token: where pretrained decoders park attention (or the model's sink_tokens)


def sink_positions(loaded: Loaded) -> int:
    """The positions ``mass_sink`` sums: the model's ``sink_tokens`` when it keeps any, else the first token."""
    return max(SINK_POSITIONS, kept_positions(loaded))


def kept_positions(loaded: Loaded) -> int:
    """The first positions the model keeps visible besides every window (``sink_tokens``)."""
    return int(getattr(loaded.routed.cfg, "sink_tokens", 0) or 0)


@dataclass
class Tokens:
    ids: list[int]
    texts: list[str]
    words: list[int]  # word per token, -1 for none
    special: list[bool]
    word_first: list[int]  # first token of each word, -1 where a word has no token kept


class _Tokenizer:
    """The run's tokenizer: bytes for an AAH run, the base model's for a retrofit (with its BOS)."""

    def __init__(self, loaded: Loaded):
        self.hf = None
        self.prefix: list[tuple[int, str]] = []
        if loaded.kind != "run":
            from transformers import AutoTokenizer

            base = loaded.extra.get("base_model")
            try:
                self.hf = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
            except (OSError, ValueError, TypeError):
                self.hf = None
            bos = getattr(self.hf, "bos_token_id", None)
            vocab = int(getattr(loaded.model.config, "vocab_size", 0) or 0)
            if bos is not None and 0 <= int(bos) < vocab:
                self.prefix = [(int(bos), str(self.hf.bos_token))]
        if self.hf is None:
            from aah_viz.corpus.tokenizer import ByteTokenizer

            self.byte = ByteTokenizer()

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        if self.hf is None:
            return self.byte.encode(text)
        enc = self.hf(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def tokens(self, doc: LensDoc, max_tokens: int) -> Tokens:
        ids, offsets = self.encode(doc.text)
        keep = max(0, max_tokens - len(self.prefix))
        ids, offsets = ids[:keep], offsets[:keep]
        n_pre = len(self.prefix)
        words, word_first = [-1] * len(ids), []
        if doc.words:
            align = align_words(offsets, doc.words)
            words = [int(u) if u < align.n_words else -1 for u in align.unit_of_token]  # gap units: no word
            word_first = [int(t) + n_pre if t >= 0 else -1 for t in align.word_first_token]
        return Tokens(
            ids=[i for i, _ in self.prefix] + ids,
            texts=[t for _, t in self.prefix] + [doc.text[a:b] for a, b in offsets],
            words=[-1] * n_pre + words,
            special=[True] * n_pre + [False] * len(ids),
            word_first=word_first,
        )


def token_links(doc: LensDoc, tokens: Tokens) -> dict[str, list]:
    """The document's word links as (query, key) token pairs: the later word's first token reads the
    earlier one's. Links with an end cut off by ``--max-tokens`` are left out."""
    rows: dict[str, list] = {c: [] for c in ("kind", "label", "query", "key", "gold", "query_is_head")}
    for link in doc.links:
        ta, tb = tokens.word_first[link.a], tokens.word_first[link.b]
        if ta < 0 or tb < 0 or ta == tb:
            continue
        query, key = max(ta, tb), min(ta, tb)
        rows["kind"].append(link.kind)
        rows["label"].append(link.label)
        rows["query"].append(query)
        rows["key"].append(key)
        rows["gold"].append(bool(link.gold))
        rows["query_is_head"].append(bool(link.a_is_head and query == ta))
    return rows


@torch.no_grad()
def document_attention(loaded: Loaded, ids: Sequence[int], full: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(probs (L, H, T, T) under full attention, executed windows (L, H)) of one document; with ``full``
    False only the routed forward runs (probs are then empty)."""
    device = next(loaded.model.parameters()).device
    x = torch.tensor([list(ids)], dtype=torch.long, device=device)
    routed = loaded.routed
    was = loaded.model.training
    loaded.model.eval()
    probs: dict[int, np.ndarray] = {}
    try:
        with routed.routing_mode("frozen"):
            model_logits(loaded.model, x)  # routed: the windows each head executes here
            windows = routed.current_windows().cpu().numpy()
            if not full:
                return np.zeros((0,)), windows
            with full_attention(routed, lambda i, p: probs.__setitem__(i, p[0].double().cpu().numpy())):
                model_logits(loaded.model, x)
    finally:
        loaded.model.train(was)
    return np.stack([probs[i] for i in sorted(probs)]), windows


def positions_of(loaded: Loaded) -> int:
    """How many positions one input may take: an AAH model's block size, a Hugging Face model's position
    limit (``probe_extract.position_limit``, the offset some models add included)."""
    if loaded.kind == "run":
        return int(loaded.routed.cfg.block_size)
    from instrumentation.measure.probe_extract import position_limit

    return position_limit(loaded.model)


def record_lens(
    loaded: Loaded,
    docs: Sequence[LensDoc],
    *,
    max_tokens: int = 64,
    top_k: int = DEFAULT_TOP_K,
    progress: Callable[[], None] | None = None,
    saved: LensProgress | None = None,
) -> dict[str, dict[str, list]]:
    """The three lens tables ({table: columns}) of ``docs``, at the loaded step.

    A SIGINT or SIGTERM stops it between documents with :class:`LensInterrupted`; with ``saved`` the
    finished documents are kept there first, and a lens given the same ``saved`` starts after them
    (``progress`` is called once per document done, the saved ones included)."""
    limit = positions_of(loaded)
    if max_tokens > limit:
        raise ConfigError(f"--max-tokens {max_tokens} is more than the model's {limit} positions")
    step = int(loaded.step or 0)
    tok = _Tokenizer(loaded)
    done, tables = saved.restore() if saved is not None else (0, {t: {} for t in TABLES})
    for _ in range(done):
        if progress is not None:
            progress()

    def add(table: str, rows: dict[str, list], doc: int) -> None:
        n = len(next(iter(rows.values()))) if rows else 0
        for col, values in {"step": [step] * n, "doc": [doc] * n, **rows}.items():
            tables[table].setdefault(col, []).extend(values)

    with StopRequest(signals=LENS_SIGNALS) as stop:
        for number in range(done, len(docs)):
            if saved is not None:
                saved.checkpoint(number, tables, stop)
            elif stop.requested:
                raise LensInterrupted(
                    f"lens stopped by {stop.requested} after {number} of {len(docs)} documents: nothing kept"
                )
            _record_doc(loaded, tok, docs[number], number, max_tokens, top_k, add)
            if progress is not None:
                progress()
    return tables


def _record_doc(loaded: Loaded, tok: _Tokenizer, doc: LensDoc, number: int, max_tokens: int, top_k: int, add) -> None:
    """One document's rows of the three tables, handed to ``add(table, rows, doc)``."""
    tokens = tok.tokens(doc, max_tokens)
    if len(tokens.ids) < 2:
        raise ConfigError(f"document {doc.id!r} has fewer than two tokens; give longer documents")
    probs, windows = document_attention(loaded, tokens.ids)
    n = len(tokens.ids)
    add(
        "lens_tokens",
        {
            "doc_id": [doc.id] * n,
            "source": [doc.source] * n,
            "position": list(range(n)),
            "token": tokens.texts,
            "word": tokens.words,
            "special": tokens.special,
        },
        number,
    )
    add("lens_links", token_links(doc, tokens), number)
    rows = attention_rows(probs, windows, top_k=top_k, sink=sink_positions(loaded), kept=kept_positions(loaded))
    add("attention_samples", rows, number)


def write_lens(
    loaded: Loaded,
    tables: dict[str, dict[str, list]],
    *,
    out=None,
    overwrite: bool = False,
    replay: Sequence[int] | None = None,
    **detail,
):
    """Write the lens tables into the loaded run at its step (a second lens of that step replaces the
    first), with a ``lens`` event, or into the new run ``out`` (a model folder's lens: step 0 of a
    one-step run naming its source, whose windows and ACR are those the model executes on the token ids
    ``replay``, the longest document); returns the run's path."""
    from instrumentation.measure.evaluation import write_result

    n_docs = len(set(tables["lens_tokens"].get("doc", [])))
    detail = {
        **detail,
        "docs": n_docs,
        "sink_positions": sink_positions(loaded),
        "sink_tokens": kept_positions(loaded),
        "checkpoint_step": loaded.step,
    }

    def run_replay() -> None:
        if replay is not None:
            document_attention(loaded, replay, full=False)

    return write_result(
        out or loaded.source,
        loaded,
        "lens",
        detail,
        tables=tables,
        overwrite=overwrite,
        before_step=run_replay,
        seq_len=None if replay is None else len(replay),
    )


def longest_document(loaded: Loaded, docs: Sequence[LensDoc], max_tokens: int) -> list[int]:
    """The token ids (as the lens reads them) of the longest of ``docs``."""
    tok = _Tokenizer(loaded)
    return max((tok.tokens(doc, max_tokens).ids for doc in docs), key=len)


def lens_progress(loaded: Loaded, docs: Sequence[LensDoc], *, max_tokens: int, top_k: int, restart: bool = False):
    """Where this lens keeps the documents it finished (the run's ``.lens-progress``), keyed by the run
    (its id: a moved run continues), the step, the documents and the options; ``restart`` discards an
    interrupted lens, else another lens's progress is refused here, before any document runs."""
    from aah_viz.runlog import read_manifest

    uid = read_manifest(loaded.source).get("run_uid")
    model = f"run {uid}" if isinstance(uid, str) else str(Path(loaded.source).resolve())
    digest = lens_digest(
        model=model, kind=loaded.kind, step=int(loaded.step or 0), docs=docs, max_tokens=max_tokens, top_k=top_k
    )
    saved = LensProgress(loaded.source, digest, total=len(docs))
    if restart:
        saved.clear()
    else:
        saved.saved()
    return saved
