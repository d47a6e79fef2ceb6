"""Passkey retrieval prompts: a five-digit key hidden at a chosen depth of repeated filler text.

The long-context check of Landmark Attention and LongLoRA: a model that reads the whole prompt
copies the key after "The pass key is"; a window that cannot reach the key, directly or through
the layers, loses it. Each prompt is sized in the model's own tokens (``count_tokens``) to a given
length, so every configuration is asked the same questions at the length it is evaluated at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

INTRO = (
    "There is an important piece of information hidden inside a lot of irrelevant text. "
    "Find it and memorize it. I will quiz you about it.\n"
)
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "\nWhat is the pass key? The pass key is"


def needle(key: int) -> str:
    return f" The pass key is {key}. Remember it. {key} is the pass key."


@dataclass(frozen=True)
class PasskeyItem:
    """One question: the prompt (ending at "The pass key is"), the answer to copy, and where the key sits."""

    prompt: str
    answer: str  # " 12345": what the model should write next
    key: int
    depth: float  # the share of the filler before the key (0: right after the intro, 1: right before the question)
    fillers_before: int
    fillers_after: int


def depths(n: int) -> list[float]:
    """``n`` depths spread evenly over the filler, ends excluded (0.1, 0.3, 0.5, 0.7, 0.9 for 5)."""
    if n < 1:
        raise ValueError("at least one depth")
    return [(i + 0.5) / n for i in range(n)]


def passkey_items(
    n_tokens: int,
    count_tokens: Callable[[str], int],
    *,
    n_depths: int = 5,
    per_depth: int = 4,
    seed: int = 0,
) -> list[PasskeyItem]:
    """``n_depths * per_depth`` questions whose prompt and answer together are at most ``n_tokens`` tokens.

    ``count_tokens(text)`` is the model's token count of a text (special tokens it adds included);
    the filler is repeated as often as fits. Keys are drawn from ``seed`` (five digits, no leading 0).
    """
    rng = np.random.default_rng(seed)
    filler_tokens = count_tokens(FILLER * 8) / 8  # a repeat's tokens, averaged over joins
    items = []
    for depth in depths(n_depths):
        for _ in range(per_depth):
            key = int(rng.integers(10_000, 100_000))
            fixed = INTRO + needle(key) + QUESTION
            answer = f" {key}"
            room = n_tokens - count_tokens(fixed + answer)
            n_fill = int(room // filler_tokens)
            while n_fill > 0 and count_tokens(_prompt(key, n_fill, depth)[0] + answer) > n_tokens:
                n_fill -= 1  # the estimate from the average repeat was one too many
            if n_fill < 1:
                raise ValueError(f"{n_tokens} tokens leave no room for filler around the pass key")
            prompt, before = _prompt(key, n_fill, depth)
            items.append(PasskeyItem(prompt, answer, key, depth, before, n_fill - before))
    return items


def _prompt(key: int, n_fill: int, depth: float) -> tuple[str, int]:
    before = int(round(n_fill * depth))
    return INTRO + FILLER * before + needle(key) + FILLER * (n_fill - before) + QUESTION, before
