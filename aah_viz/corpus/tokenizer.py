"""A byte-level tokenizer: one token per UTF-8 byte (vocabulary 256), with character offsets.

Any text can be encoded, so any English (or other) text can be probed later. Each token carries
the character span of the character its byte belongs to: all bytes of a multi-byte character map
to that character's ``(start, end)``, so words given as character spans align to tokens exactly.
"""

from __future__ import annotations

VOCAB_SIZE = 256


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255."""

    vocab_size = VOCAB_SIZE

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Return ``(ids, offsets)``; ``offsets[i]`` is the character span of token ``i``."""
        data = text.encode("utf-8")
        if len(data) == len(text):  # pure ASCII: one byte per character
            return list(data), [(i, i + 1) for i in range(len(text))]
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for index, char in enumerate(text):
            encoded = char.encode("utf-8", errors="surrogatepass")
            ids.extend(encoded)
            offsets.extend([(index, index + 1)] * len(encoded))
        return ids, offsets

    def encode_ids(self, text: str) -> list[int]:
        """Token ids only (the training stream)."""
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        """Bytes back to text; invalid UTF-8 sequences (e.g. a cut character) become U+FFFD."""
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")
