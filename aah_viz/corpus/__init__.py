"""The synthetic corpus with planted structure, the byte tokenizer, and the corpus writers."""

from aah_viz.corpus.document import Chain, Corpus, Document, Mention, Sentence, Word
from aah_viz.corpus.synthetic import generate_corpus, generate_document, training_stream, training_text
from aah_viz.corpus.tokenizer import ByteTokenizer
from aah_viz.corpus.writers import write_conllu, write_coref_jsonl

__all__ = [
    "ByteTokenizer",
    "Chain",
    "Corpus",
    "Document",
    "Mention",
    "Sentence",
    "Word",
    "generate_corpus",
    "generate_document",
    "training_stream",
    "training_text",
    "write_conllu",
    "write_coref_jsonl",
]
