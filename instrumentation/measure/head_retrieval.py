"""Which heads the passkey check needs: every head's window shortened alone, the rest at full attention.

A window breaks retrieval through the heads that carry the key forward. To find them, the model
answers the same passkey questions (``aah_viz.corpus.passkey``) once with every head at full causal
attention (the baseline) and once per head with only that head cut to ``window`` (plus the first
``sinks`` positions, method §10.4), every other head of every layer at full attention. A head whose
cut loses questions the baseline answered is one the retrieval needs (the question DuoAttention's
retrieval heads answer). Besides the count of answers, each row keeps the mean negative
log-likelihood of the answer's tokens, which moves before an answer flips.

Every layer runs the dense masked backend with explicit per-head windows, whatever the model routes
(``aah-viz profile`` measures a model as it is loaded, its routing state untouched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from aah_viz.corpus.passkey import PasskeyItem, passkey_items
from aah_viz.errors import ConfigError
from instrumentation.measure.profile import dense_attention
from instrumentation.measure.retrieval import answer_logits
from instrumentation.model import model_logits


def head_windows(routed, windows: dict[tuple[int, int], int], sinks: int = 0):
    """Every attention layer of ``routed`` at full causal attention except the heads in ``windows``
    ({(layer, head): window}), which see their last ``window`` keys and the first ``sinks`` positions."""
    return dense_attention(
        routed, lambda layer, n_head, T: [windows.get((layer, h), T) for h in range(n_head)], sinks=sinks
    )


def answer_scores(
    model, items: Sequence[PasskeyItem], encode: Callable[[str], list[int]], device, logits_fn
) -> tuple[np.ndarray, np.ndarray]:
    """Per question: whether every answer token is the model's argmax, and the answer's mean NLL (nats)."""
    hits, nll = [], []
    for item in items:
        logits, answer = answer_logits(model, item, encode, device, logits_fn)
        logits = logits.double()
        target = torch.tensor(answer, device=logits.device)
        hits.append(logits.argmax(dim=-1).tolist() == answer)
        nll.append(float(torch.nn.functional.cross_entropy(logits, target)))
    return np.asarray(hits, dtype=bool), np.asarray(nll)


def head_retrieval(
    model,
    routed,
    items: Sequence[PasskeyItem],
    encode: Callable[[str], list[int]],
    *,
    window: int,
    sinks: int = 0,
    logits_fn,
    step: int = 0,
    on_head: Callable[[], None] | None = None,
) -> tuple[dict, dict]:
    """Rows of the ``head_retrieval`` table (one per head) and the baseline's detail.

    ``on_head`` is called after each head (a progress bar's update)."""
    if not items:
        raise ValueError("no passkey questions")
    device = next(model.parameters()).device
    heads = [(layer.layer_index, h) for layer in routed.attention_layers() for h in range(int(layer.n_head))]
    was = model.training
    model.eval()
    rows: dict[str, list] = {
        k: [] for k in ("step", "layer", "head", "window", "sink_tokens", "asked", "retrieved", "lost", "answer_nll")
    }
    try:
        with torch.no_grad():
            with head_windows(routed, {}):
                base_hits, base_nll = answer_scores(model, items, encode, device, logits_fn)
            for layer, h in heads:
                with head_windows(routed, {(layer, h): int(window)}, sinks):
                    hits, nll = answer_scores(model, items, encode, device, logits_fn)
                rows["step"].append(int(step))
                rows["layer"].append(int(layer))
                rows["head"].append(h)
                rows["window"].append(int(window))
                rows["sink_tokens"].append(int(sinks))
                rows["asked"].append(len(items))
                rows["retrieved"].append(int(hits.sum()))
                rows["lost"].append(int((base_hits & ~hits).sum()))
                rows["answer_nll"].append(float(nll.mean()))
                if on_head is not None:
                    on_head()
    finally:
        model.train(was)
    lost = np.asarray(rows["lost"])
    detail = {
        "window": int(window),
        "sink_tokens": int(sinks),
        "asked": len(items),
        "baseline_retrieved": int(base_hits.sum()),
        "baseline_answer_nll": float(base_nll.mean()),
        "heads": len(lost),
        "heads_losing_any": int((lost > 0).sum()),
        "heads_losing_half": int((lost * 2 >= max(int(base_hits.sum()), 1)).sum()) if base_hits.any() else 0,
    }
    return rows, detail


def retrieval_questions(loaded, seq_len: int, per_depth: int, window: int) -> list[PasskeyItem]:
    """The questions ``head_retrieval_of`` asks of an evaluation source (``evaluation.Loaded``): ``per_depth`` at
    each of five depths, prompt and answer at most ``seq_len`` tokens, keys drawn from the source's seed (0 if
    none); refused in one line before any model work when they cannot be asked."""
    if not 1 <= int(per_depth) <= 1000:
        raise ConfigError(f"--retrieval {per_depth}: give the passkey questions per depth, from 1 to 1000")
    if not 1 <= int(window) < int(seq_len):
        raise ConfigError(f"--retrieval-window {window}: give a window from 1 to below the {seq_len} tokens profiled")
    encode = loaded.encode
    try:
        return passkey_items(
            int(seq_len), lambda text: len(encode(text)) + 1, per_depth=int(per_depth), seed=int(loaded.seed or 0)
        )
    except ValueError as err:
        raise ConfigError(f"--retrieval at {seq_len} tokens: {err}") from None


def head_retrieval_of(loaded, items: Sequence[PasskeyItem], window: int, sinks: int, *, progress: bool = False):
    """``head_retrieval`` of an evaluation source on ``items``, with a progress bar over the heads."""
    n_heads = sum(int(layer.n_head) for layer in loaded.routed.attention_layers())
    with tqdm(total=n_heads, desc="heads cut alone", unit="head", disable=not progress) as bar:
        return head_retrieval(
            loaded.model,
            loaded.routed,
            items,
            loaded.encode,
            window=window,
            sinks=sinks,
            logits_fn=model_logits,
            step=int(loaded.step or 0),
            on_head=bar.update,
        )
