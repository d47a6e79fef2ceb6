"""The corpus writers: CoNLL-U with character offsets, and the coreference JSONL format
(docs/probes.md)."""

from __future__ import annotations

import json
from pathlib import Path

from aah_viz.corpus.document import Corpus, Document


def write_conllu(corpus: Corpus | list[Document], path) -> Path:
    """CoNLL-U with ``# newdoc id``, ``# doc_id``, ``# sent_id``, ``# text`` and character offsets
    (relative to the document) in MISC as ``start_char=..|end_char=..``."""
    docs = corpus.documents if isinstance(corpus, Corpus) else corpus
    lines: list[str] = []
    for doc in docs:
        for s_index, sentence in enumerate(doc.sentences):
            if s_index == 0:
                lines.append(f"# newdoc id = {doc.id}")
            lines.append(f"# doc_id = {doc.id}")
            lines.append(f"# sent_id = {sentence.id}")
            lines.append(f"# text = {sentence.text_in(doc.text)}")
            for i, word in enumerate(sentence.words):
                misc = f"start_char={word.start}|end_char={word.end}"
                nxt = sentence.words[i + 1] if i + 1 < len(sentence.words) else None
                if nxt is not None and nxt.start == word.end:
                    misc += "|SpaceAfter=No"
                lemma = word.form if word.upos == "PROPN" else word.form.lower()
                fields = [
                    str(i + 1),
                    word.form,
                    lemma,
                    word.upos or "_",
                    "_",
                    "_",
                    str(word.head if word.head is not None else "_"),
                    word.deprel or "_",
                    "_",
                    misc,
                ]
                lines.append("\t".join(fields))
            lines.append("")
    path = Path(path)
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    return path


def document_to_coref_json(doc: Document, include_words: bool = True) -> dict:
    """One document in the coreference JSONL format (docs/probes.md)."""
    words = doc.words
    chains = []
    for chain in doc.chains:
        mentions = []
        for m in chain.mentions:
            item = {"start": m.start, "end": m.end, "head_start": words[m.head].start, "head_end": words[m.head].end}
            for key in ("kind", "gender", "number"):
                value = getattr(m, key)
                if value is not None:
                    item[key] = value
            mentions.append(item)
        chains.append({"id": chain.id, "mentions": mentions})
    item = {"id": doc.id, "text": doc.text, "chains": chains}
    if include_words:
        item["words"] = [{"start": w.start, "end": w.end} for w in words]
    return item


def write_coref_jsonl(corpus: Corpus | list[Document], path, include_words: bool = True) -> Path:
    """The coreference JSONL format: one document per line (docs/probes.md).

    ``include_words=False`` leaves the word list out; readers then split the text at whitespace
    and punctuation, which gives the same words for this corpus."""
    docs = corpus.documents if isinstance(corpus, Corpus) else corpus
    path = Path(path)
    with path.open("w", encoding="utf-8") as out:
        for doc in docs:
            out.write(
                json.dumps(document_to_coref_json(doc, include_words), ensure_ascii=False, separators=(",", ":")) + "\n"
            )
    return path
