"""Words on screen for the tables' names: scalar labels keep the name a reader looks up (its tag)."""

from __future__ import annotations

from aah_viz.dashboard.labels import SCALAR_LABELS, scalar_label
from aah_viz.schema import SCALAR_NAMES


def test_every_fixed_scalar_name_reads_as_words_with_its_name_beside_them():
    for name in SCALAR_NAMES:
        label = scalar_label(name)
        assert label.endswith(f"({name})") and label != name, name
        assert "_" not in label.removesuffix(f"({name})"), label
    assert scalar_label("acr/layer_3") == f"{SCALAR_LABELS['acr']}, layer 3 (acr/layer_3)"
    assert scalar_label("my_custom_metric") == "my_custom_metric"  # no words of its own: as logged


def test_a_heads_probe_scores_read_as_words_summary_first():
    from aah_viz.dashboard.labels import metric_words, scores_words

    line = scores_words(["acl:dep2head", "score", "score_minus_baseline", "x"], [0.3, 0.41, 0.12, float("nan")])
    assert line == "best relation score 0.410, score minus offset baseline 0.120, acl:dep2head 0.300"
    assert metric_words("ppl@sliding_window_8") == "perplexity, sliding_window_8"
    assert metric_words("val_loss") == "validation loss" and metric_words("my@thing") == "my@thing"
