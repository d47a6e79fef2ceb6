"""``bounded_json.nesting_depth`` against a character-by-character reading of the text, and the depth of
nested values written by ``json.dumps`` (strings full of brackets, quotes and escapes left out)."""

from __future__ import annotations

import json
import random

import pytest

from aah_viz.runlog import bounded_json


def depth_by_characters(text: str) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def nested(rng: random.Random, levels: int):
    """A value exactly ``levels`` deep whose strings hold brackets, quotes and backslashes."""
    text = "".join(rng.choice('[]{}"\\ab,:') for _ in range(rng.randrange(8)))
    if levels == 0:
        return rng.choice([text, 1, None, 2.5])
    inner = nested(rng, levels - 1)
    return [text, inner] if rng.random() < 0.5 else {text: inner, "k": text}


def test_the_depth_of_written_json_with_brackets_inside_strings():
    rng = random.Random(0)
    for levels in range(0, 12):
        for _ in range(20):
            text = json.dumps(nested(rng, levels))
            assert bounded_json.nesting_depth(text) == levels == depth_by_characters(text)
            assert bounded_json.nesting_depth(text.encode()) == levels


def test_any_text_reads_as_the_character_by_character_reading():
    rng = random.Random(1)
    for _ in range(3000):  # malformed too: unterminated strings, a backslash at the end, stray closers
        text = "".join(rng.choice('[]{}"\\ab\n') for _ in range(rng.randrange(40)))
        assert bounded_json.nesting_depth(text) == depth_by_characters(text), repr(text)


def test_a_text_nested_too_deep_is_refused_before_json_reads_it():
    with pytest.raises(ValueError, match="nested more than"):
        bounded_json.loads("[" * 100_000 + "]" * 100_000)
    assert bounded_json.loads(json.dumps({"a": "[[[[" * 100})) == {"a": "[[[[" * 100}
