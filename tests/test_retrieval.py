"""The passkey check: its verdict per question against the model's own greedy decoding, its interval
against scipy's and statsmodels' Wilson intervals."""

from __future__ import annotations

import math

import pytest

from aah_viz.corpus.passkey import passkey_items
from aah_viz.stats.proportions import wilson_interval

torch = pytest.importorskip("torch")


def wilson_by_formula(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(("k", "n"), [(0, 5), (3, 7), (20, 20), (11, 40)])
def test_wilson_interval_is_scipys_and_statsmodels(k, n):
    from scipy.stats import binomtest
    from statsmodels.stats.proportion import proportion_confint

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert wilson_interval(k, n) == pytest.approx(proportion_confint(k, n, alpha=0.05, method="wilson"), abs=1e-9)
    assert wilson_interval(k, n, level=0.9) == pytest.approx(
        proportion_confint(k, n, alpha=0.1, method="wilson"), abs=1e-9
    )


def test_wilson_interval_refuses_impossible_counts():
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


def char_encode(text: str) -> list[int]:
    return [ord(c) for c in text]  # one token a character: the prompts are ASCII, the vocabulary 300


def greedy_answer(model, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding, one token at a time, each forward over the whole text so far."""
    ids = list(prompt)
    for _ in range(n):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits
        ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt) :]


def test_verdicts_match_greedy_decoding_and_the_summary_counts_them(tmp_path, tiny_causal_lm):
    from transformers import AutoModelForCausalLM

    from instrumentation.measure.retrieval import passkey_retrieval, retrieved

    folder = tiny_causal_lm(tmp_path / "lm", max_position_embeddings=512)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    items = passkey_items(420, lambda t: len(char_encode(t)), n_depths=2, per_depth=2, seed=5)
    device = torch.device("cpu")
    # a random model: make one answer its own greedy continuation, so both verdicts occur
    first = items[0]
    own = "".join(chr(t) for t in greedy_answer(model, char_encode(first.prompt), 6))
    items[0] = type(first)(first.prompt, own, first.key, first.depth, first.fillers_before, first.fillers_after)
    verdicts = [retrieved(model, item, char_encode, device) for item in items]
    expected = [
        greedy_answer(model, char_encode(i.prompt), len(char_encode(i.answer))) == char_encode(i.answer) for i in items
    ]
    assert verdicts == expected and verdicts[0] is True
    summary = passkey_retrieval(model, None, items, char_encode, device)
    assert summary["correct"] == sum(expected) and summary["n"] == 4
    assert summary["ci95"] == pytest.approx(list(wilson_by_formula(sum(expected), 4)), abs=1e-9)
    assert sum(c[0] for c in summary["by_depth"].values()) == sum(expected)
    assert sorted(summary["by_depth"]) == ["0.25", "0.75"]
    assert summary["prompt_tokens"] <= 420
