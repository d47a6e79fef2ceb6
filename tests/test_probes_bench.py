"""``aah-viz bench probe``: the forward side feeds the model exactly what the probe feeds it."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from aah_viz.bundled import data_path  # noqa: E402
from aah_viz.cli import main  # noqa: E402
from aah_viz.corpus.probe_set import PROBE_SET_CONLLU, PROBE_SET_COREF  # noqa: E402
from aah_viz.probes.conllu_reader import read_conllu  # noqa: E402
from aah_viz.probes.coref_formats import read_coref  # noqa: E402
from aah_viz.probes.runner import run_probes  # noqa: E402


class RecordingSource:
    """An attention source that keeps every batch it is asked to attend to."""

    def __init__(self, source):
        self.source, self.batches = source, []

    def __getattr__(self, name):
        return getattr(self.source, name)

    def attend(self, batch):
        self.batches.append([list(ids) for ids in batch])
        return self.source.attend(batch)


@pytest.mark.parametrize("context", ["sentence", "document"])
def test_forward_side_gets_the_probes_batches(context):
    from instrumentation import AAHAttentionSource, AAHConfig, AAHTransformer
    from instrumentation.bench.probe import probe_batches

    torch.manual_seed(0)
    source = AAHAttentionSource(AAHTransformer(AAHConfig.from_preset("tiny")), step=0)
    syntax = read_conllu(data_path(PROBE_SET_CONLLU), 2)
    coref = read_coref(data_path(PROBE_SET_COREF), 3)
    recording = RecordingSource(source)
    run_probes(recording, syntax, coref, context=context, batch_size=7, n_boot=10, min_count=1)
    assert probe_batches(source, syntax, coref, context, 7) == recording.batches
    assert sum(len(b) for b in recording.batches) > len(syntax) + len(coref)  # sentences or chunks, not documents


def test_bench_probe_prints_paired_ratios(capsys):
    code = main(["bench", "probe", "--pairs", "2", "--max-docs", "1", "--bootstrap", "10", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ratio"] > 0 and result["goal"] == 1.5 and result["clock"] == "cpu"
    raw = result["raw_s"]["probe_vs_forward"]["cpu"]
    assert len(raw["probe"]) == len(raw["forward"]) == 2
    assert result["inputs"] > 0 and result["tokens"] >= result["inputs"]
