"""The documents a probe reads: ``--syntax`` and ``--coref`` files (the bundled synthetic set without
either), cut to ``--max-docs`` and sampled to ``--sample-docs``. Read, and refused in one line, before any
model loads."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from aah_viz.bundled import data_path
from aah_viz.corpus.document import Document
from aah_viz.errors import InputFormatError


class ProbeInputs(NamedTuple):
    syntax_docs: list[Document]
    coref_docs: list[Document]
    syntax_path: str | Path | None  # None: no syntax input
    coref_path: str | Path | None


def read_inputs(
    syntax: str | Path | None = None,
    coref: str | Path | None = None,
    *,
    max_docs: int | None = None,
    sample_docs: int | None = None,
    sample_seed: int = 0,
) -> ProbeInputs:
    """The syntax (CoNLL-U) and coreference documents of the two files; without either, the bundled set."""
    from aah_viz.corpus.probe_set import PROBE_SET_CONLLU, PROBE_SET_COREF
    from aah_viz.probes.conllu_reader import read_conllu
    from aah_viz.probes.coref_formats import read_coref
    from aah_viz.probes.runner import sample_documents

    if syntax is None and coref is None:
        syntax, coref = data_path(PROBE_SET_CONLLU), data_path(PROBE_SET_COREF)
    for flag, value in (("--max-docs", max_docs), ("--sample-docs", sample_docs)):
        if value is not None and value < 1:
            raise InputFormatError(f"{flag} must be at least 1, got {value}")
    syntax_docs = read_conllu(syntax, max_docs) if syntax else []
    coref_docs = read_coref(coref, max_docs) if coref else []
    if sample_docs is not None:
        syntax_docs = sample_documents(syntax_docs, sample_docs, sample_seed)
        coref_docs = sample_documents(coref_docs, sample_docs, sample_seed)
    if coref and not any(doc.chains for doc in coref_docs):
        raise InputFormatError(f"{coref}: no coreference chains in the documents read")
    return ProbeInputs(syntax_docs, coref_docs, syntax, coref)
