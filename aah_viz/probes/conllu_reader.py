"""Read CoNLL-U (Universal Dependencies) into documents with word character offsets.

Parsing is done by the ``conllu`` package; this module adds what the probes need and what the
package lets pass silently: every token line is checked (10 tab-separated columns, a valid ID,
an integer HEAD inside the sentence), and errors name the file and the line.

- Multiword tokens (``1-2``): the syntactic words share the surface token's characters; when
  their forms spell the surface form (``do`` + ``n't``) each gets its own part, otherwise the
  span is divided among them in proportion to their form lengths.
- Empty nodes (``2.1``) belong to enhanced dependencies only and are skipped.
- Documents: ``# newdoc`` starts one, as does a change of ``# doc_id``; a file without either
  gives one document per sentence. A document's text is its sentences' ``# text`` joined by one
  space (the synthetic corpus writes its documents exactly so); without ``# text`` the sentence
  text is rebuilt from the surface forms and ``SpaceAfter=No``.
"""

from __future__ import annotations

import re
from pathlib import Path

import conllu

from aah_viz.corpus.document import Document, Sentence, Word
from aah_viz.errors import InputFormatError
from aah_viz.probes.textfile import read_user_text

_WORD_ID = re.compile(r"^[1-9][0-9]*$")
_RANGE_ID = re.compile(r"^([1-9][0-9]*)-([1-9][0-9]*)$")
_EMPTY_ID = re.compile(r"^[0-9]+\.[1-9][0-9]*$")


def _fail(path, line: int, message: str) -> InputFormatError:
    return InputFormatError(f"{path}:{line}: {message}")


def _blocks(path: Path, text: str):
    """Sentence blocks as lists of (line number, line)."""
    block: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() == "":
            if block:
                yield block
                block = []
            continue
        block.append((number, line.rstrip("\r")))
    if block:
        yield block


def _check_block(path: Path, block: list[tuple[int, str]]) -> None:
    tokens = [(n, line) for n, line in block if not line.startswith("#")]
    if not tokens:
        raise _fail(path, block[0][0], "a sentence block with comments but no token lines")
    n_words = sum(1 for _, line in tokens if _WORD_ID.match(line.split("\t", 1)[0]))
    expected = 1
    heads: dict[int, tuple[int, int]] = {}  # word -> (its head, its line)
    for number, line in tokens:
        cols = line.split("\t")
        if len(cols) != 10:
            hint = " (is this a CoNLL-U file? columns are separated by tabs)" if len(cols) == 1 else ""
            raise _fail(path, number, f"expected 10 tab-separated columns, found {len(cols)}{hint}")
        tid, form, head, deprel = cols[0], cols[1], cols[6], cols[7]
        if _RANGE_ID.match(tid):
            lo, hi = map(int, _RANGE_ID.match(tid).groups())
            if lo != expected or hi < lo:
                raise _fail(path, number, f"multiword token range {tid!r} does not start at word {expected}")
            continue
        if _EMPTY_ID.match(tid):
            continue
        if not _WORD_ID.match(tid):
            raise _fail(path, number, f"invalid ID {tid!r}: expected 1, 2, ... (or a range 1-2, or an empty node 1.1)")
        if int(tid) != expected:
            raise _fail(path, number, f"word ID {tid} out of order: expected {expected}")
        expected += 1
        if form == "":
            raise _fail(path, number, "empty FORM")
        if head != "_":
            if not head.isdigit():
                raise _fail(path, number, f"HEAD {head!r} is not a number")
            if int(head) > n_words:
                raise _fail(path, number, f"HEAD {head} is outside the sentence (it has {n_words} words)")
            if int(head) == int(tid):
                raise _fail(path, number, f"word {tid} is its own head")
            if deprel in ("", "_"):
                raise _fail(path, number, "a word with a HEAD needs a DEPREL")
            heads[int(tid)] = (int(head), number)
    _check_tree(path, heads)


def _check_tree(path: Path, heads: dict[int, tuple[int, int]]) -> None:
    """A sentence's gold heads form one tree: one root (HEAD 0) and no cycle."""
    roots = [(word, line) for word, (head, line) in heads.items() if head == 0]
    if len(roots) > 1:
        words = ", ".join(str(w) for w, _ in roots)
        raise _fail(path, roots[1][1], f"a second root (words {words} have HEAD 0); a dependency tree has one root")
    reaches_root: set[int] = set()  # words whose chain of heads ends at the root: each walked once
    for start, (_, line) in heads.items():
        walked, word = {start}, start
        while word in heads and heads[word][0] != 0 and word not in reaches_root:
            word = heads[word][0]
            if word in walked:
                raise _fail(path, line, f"word {start}'s heads run in a cycle (through word {word}); not a tree")
            walked.add(word)
        reaches_root |= walked


def _space_after(token) -> bool:
    misc = token.get("misc") or {}
    return misc.get("SpaceAfter") != "No"


def _split_span(start: int, end: int, forms: list[str], surface: str) -> list[tuple[int, int]]:
    """Character spans of a multiword token's words inside the surface span."""
    if "".join(forms) == surface:
        spans, pos = [], start
        for form in forms:
            spans.append((pos, pos + len(form)))
            pos += len(form)
        return spans
    n, length = len(forms), end - start
    if length < n:  # too short to give each word a character: all share the span
        return [(start, end)] * n
    weights = [max(len(f), 1) for f in forms]
    total = sum(weights)
    cuts = [start]
    acc = 0
    for w in weights[:-1]:
        acc += w
        cut = start + round(length * acc / total)
        cuts.append(min(max(cut, cuts[-1] + 1), end - (n - len(cuts))))
    cuts.append(end)
    return [(cuts[i], cuts[i + 1]) for i in range(n)]


def _sentence_words(path, block, tokenlist, sent_text: str | None, offset: int):
    """(sentence text, words) with character offsets relative to the document (``offset``)."""
    surface = []  # (form, [word tokens], space_after, line number)
    lines = {}
    token_lines = [n for n, line in block if not line.startswith("#")]
    for token, number in zip(tokenlist, token_lines):
        lines[id(token)] = number
    pending = None
    for token in tokenlist:
        tid = token["id"]
        if isinstance(tid, tuple) and len(tid) == 3 and tid[1] == "-":
            pending = [token, [], tid[2]]
            surface.append(pending)
            continue
        if isinstance(tid, tuple):  # empty node
            continue
        if pending is not None and tid <= pending[2]:
            pending[1].append(token)
            continue
        pending = None
        surface.append([token, [token], None])
    if sent_text is None:
        parts = []
        for tok, _, _ in surface:
            parts.append(tok["form"] + (" " if _space_after(tok) else ""))
        sent_text = "".join(parts).rstrip(" ")
    words: list[Word] = []
    cursor = 0
    for tok, members, _ in surface:
        form = tok["form"]
        found = sent_text.find(form, cursor)
        if found < 0:
            raise _fail(
                path,
                lines[id(tok)],
                f"form {form!r} is not found in the sentence text after character {cursor} (# text = {sent_text!r})",
            )
        start, end = found, found + len(form)
        cursor = end
        spans = [(start, end)] if len(members) == 1 else _split_span(start, end, [m["form"] for m in members], form)
        for member, (s, e) in zip(members, spans):
            head = member["head"]
            words.append(
                Word(
                    member["form"],
                    offset + s,
                    offset + e,
                    None if head is None else int(head),
                    None if member["deprel"] in (None, "_") else member["deprel"],
                    None if member["upos"] in (None, "_") else member["upos"],
                )
            )
    return sent_text, words


def read_conllu(path, max_docs: int | None = None) -> list[Document]:
    """Documents of a CoNLL-U file; raises :class:`InputFormatError` naming file and line."""
    path = Path(path)
    text = read_user_text(path, "CoNLL-U")
    docs: list[Document] = []
    current: dict | None = None
    doc_lines: dict[str, int] = {}  # document id -> line where it started

    def finish():
        if current and current["sentences"]:
            docs.append(Document(current["id"], " ".join(current["texts"]), current["sentences"]))

    for block in _blocks(path, text):
        _check_block(path, block)
        try:
            tokenlist = conllu.parse("\n".join(line for _, line in block) + "\n\n")[0]
        except conllu.exceptions.ParseException as err:
            raise _fail(path, block[0][0], f"sentence starting here: {err}") from None
        meta = tokenlist.metadata
        doc_id = meta.get("doc_id")
        new_doc = "newdoc" in meta or "newdoc id" in meta
        if current is None or new_doc or (doc_id is not None and doc_id != current["id"]) or current["single"]:
            finish()
            if max_docs is not None and len(docs) >= max_docs:
                current = None
                break
            name = meta.get("newdoc id") or doc_id or meta.get("sent_id") or f"{path.name}#{len(docs) + 1}"
            if str(name) in doc_lines:
                raise _fail(
                    path,
                    block[0][0],
                    f"document id {name!r} again (first at line {doc_lines[str(name)]}); document ids must be unique",
                )
            doc_lines[str(name)] = block[0][0]
            single = not new_doc and doc_id is None
            current = {"id": str(name), "texts": [], "sentences": [], "pos": 0, "single": single}
        offset = current["pos"] + (1 if current["texts"] else 0)
        sent_text, words = _sentence_words(path, block, tokenlist, meta.get("text"), offset)
        sent_id = meta.get("sent_id") or f"{current['id']}-s{len(current['sentences']) + 1}"
        current["sentences"].append(Sentence(str(sent_id), offset, offset + len(sent_text), tuple(words)))
        current["texts"].append(sent_text)
        current["pos"] = offset + len(sent_text)
    else:
        finish()
    return docs
