"""The bundled probe set, held out from training by its own seed, and ``python -m aah_viz.corpus``,
which writes it."""

from __future__ import annotations

import argparse
from pathlib import Path

from aah_viz.corpus.synthetic import generate_corpus
from aah_viz.corpus.writers import write_conllu, write_coref_jsonl

PROBE_SET_SEED = 987_654
PROBE_SET_DOCS = 40
PROBE_SET_CONLLU = "synthetic_probe.conllu"
PROBE_SET_COREF = "synthetic_probe.coref.jsonl"


def write_probe_set(folder, n_docs: int = PROBE_SET_DOCS, seed: int = PROBE_SET_SEED) -> tuple[Path, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    corpus = generate_corpus(n_docs, seed)
    return write_conllu(corpus, folder / PROBE_SET_CONLLU), write_coref_jsonl(
        corpus, folder / PROBE_SET_COREF, include_words=False
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aah_viz.corpus", description="Write the synthetic corpus (CoNLL-U trees and coreference JSONL)."
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--docs", type=int, default=PROBE_SET_DOCS, help="number of documents")
    parser.add_argument("--seed", type=int, default=PROBE_SET_SEED, help="corpus seed")
    args = parser.parse_args(argv)
    for path in write_probe_set(args.out, args.docs, args.seed):
        print(path)
    return 0
