"""Passkey prompts: sized in the model's tokens, the key where the depth says, drawn from the seed."""

from __future__ import annotations

import pytest

from aah_viz.corpus.passkey import FILLER, INTRO, QUESTION, passkey_items


def byte_count(text: str) -> int:
    return len(text.encode()) + 1  # one added token, as a BOS would be


@pytest.mark.parametrize("n_tokens", [420, 1024])
def test_prompts_fill_the_length_without_passing_it(n_tokens):
    items = passkey_items(n_tokens, byte_count, n_depths=3, per_depth=2, seed=1)
    assert len(items) == 6
    for item in items:
        used = byte_count(item.prompt + item.answer)
        assert used <= n_tokens
        assert n_tokens - used < byte_count(FILLER)  # one more repeat would not fit
        assert item.prompt.startswith(INTRO) and item.prompt.endswith(QUESTION)
        assert item.answer == f" {item.key}" and 10_000 <= item.key < 100_000
        assert item.prompt.count(str(item.key)) == 2  # stated twice in the needle, nowhere else
        before, _, _ = item.prompt.partition(" The pass key is ")
        assert before.count(FILLER) == item.fillers_before


def test_the_key_sits_at_its_depth():
    items = passkey_items(2000, byte_count, n_depths=5, per_depth=1)
    assert [round(i.depth, 2) for i in items] == [0.1, 0.3, 0.5, 0.7, 0.9]
    for item in items:
        total = item.fillers_before + item.fillers_after
        assert abs(item.fillers_before / total - item.depth) <= 1 / total
    positions = [item.prompt.index(str(item.key)) for item in items]
    assert positions == sorted(positions)


def test_same_seed_same_keys_other_seed_other_keys():
    keys = [i.key for i in passkey_items(400, byte_count, seed=3)]
    assert keys == [i.key for i in passkey_items(400, byte_count, seed=3)]
    assert keys != [i.key for i in passkey_items(400, byte_count, seed=4)]


def test_too_short_a_length_is_refused():
    with pytest.raises(ValueError, match="no room"):
        passkey_items(150, byte_count)
