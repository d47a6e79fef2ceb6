"""The passkey check of one model configuration: does the model copy a key it read earlier in the prompt?

Each question (``aah_viz.corpus.passkey``) is the prompt followed by its answer, run in one forward; the
answer counts as retrieved when the model's most likely next token is the answer's token at every one
of its positions (teacher forcing: the same as greedy decoding of the answer, in one pass). A patched
model runs with its routing frozen, as its perplexity rows are evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from aah_viz.corpus.passkey import PasskeyItem
from aah_viz.stats.proportions import wilson_interval
from instrumentation.model import model_logits


def retrieved(
    model: torch.nn.Module,
    item: PasskeyItem,
    encode: Callable[[str], list[int]],
    device: torch.device,
    logits_fn: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = model_logits,
) -> bool:
    """Whether ``model`` writes ``item.answer`` after ``item.prompt`` (every answer token its argmax)."""
    logits, answer = answer_logits(model, item, encode, device, logits_fn)
    return logits.argmax(dim=-1).tolist() == answer


def answer_logits(
    model: torch.nn.Module,
    item: PasskeyItem,
    encode: Callable[[str], list[int]],
    device: torch.device,
    logits_fn: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = model_logits,
) -> tuple[torch.Tensor, list[int]]:
    """The logits that predict each answer token (teacher forcing, one forward) and the answer's tokens."""
    prompt, answer = encode(item.prompt), encode(item.answer)
    x = torch.tensor([prompt + answer], dtype=torch.long, device=device)
    return logits_fn(model, x)[0, len(prompt) - 1 : len(prompt) - 1 + len(answer)], answer


def passkey_retrieval(
    model: torch.nn.Module,
    routed,
    items: Sequence[PasskeyItem],
    encode: Callable[[str], list[int]],
    device: torch.device,
    logits_fn: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = model_logits,
) -> dict:
    """The share of ``items`` retrieved, with Wilson's 95% interval and the counts at each depth.

    ``routed`` is the patched model's handle (its routing frozen during the check), or None for a
    model that routes nothing.
    """
    if not items:
        raise ValueError("no passkey questions")
    was_training = model.training
    model.eval()
    hits = []
    try:
        with torch.no_grad(), _frozen(routed):
            for item in items:
                hits.append(retrieved(model, item, encode, device, logits_fn))
    finally:
        model.train(was_training)
    by_depth: dict[str, list[int]] = {}
    for item, hit in zip(items, hits):
        counts = by_depth.setdefault(f"{item.depth:.2f}", [0, 0])
        counts[0] += int(hit)
        counts[1] += 1
    correct = sum(hits)
    lo, hi = wilson_interval(correct, len(hits))
    return {
        "accuracy": correct / len(hits),
        "ci95": [lo, hi],
        "correct": correct,
        "n": len(hits),
        "by_depth": by_depth,  # depth -> [retrieved, asked]
        "prompt_tokens": max(len(encode(i.prompt)) + len(encode(i.answer)) for i in items),
    }


def _frozen(routed):
    if routed is None:
        from contextlib import nullcontext

        return nullcontext()
    return routed.routing_mode("frozen")
