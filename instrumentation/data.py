"""Training data: a token stream cut into consecutive, non-overlapping blocks of T+1 tokens.

As in the reference (method section 2): block ``i`` holds tokens ``[i*T, i*T + T]``; the input
is the first T tokens and the target the same block shifted by one. The stream is either the
project's synthetic corpus (``aah_viz.corpus``) or a plain-text file read as UTF-8 bytes. The
last blocks form a held-out validation split that training never sees.

The order of training blocks is a pure function of (seed, step, rank): each epoch is a seeded
permutation of the training blocks, and global batch ``step`` takes the next ``batch_size *
world_size`` positions of the concatenated epochs. A resumed run therefore sees exactly the
batches the uninterrupted run would have seen, with no loader state in the checkpoint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from aah_viz.errors import ConfigError, InputFormatError

SYNTHETIC = "synthetic"
DEFAULT_SYNTHETIC_DOCS = 400
VOCAB_SIZE = 256  # byte tokens


def _text_file_tokens(path: Path) -> np.ndarray:
    if not path.is_file():
        raise InputFormatError(
            f"training data {str(path)!r} is not a file; pass --data synthetic or the path of a plain-text (UTF-8) file"
        )
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFormatError(
            f"{path}: not UTF-8 text (byte {err.start}); convert the file to UTF-8 plain text first"
        ) from err
    return np.frombuffer(raw, dtype=np.uint8).astype(np.int64)


def file_identity(path: str | Path) -> dict:
    """What tells a training text apart: its resolved path, its size and its SHA-256 (a resume checks them)."""
    path = Path(path)
    raw = path.read_bytes()
    return {"path": str(path.resolve()), "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def _synthetic_tokens(n_docs: int, seed: int) -> np.ndarray:
    from aah_viz.corpus.synthetic import training_stream

    return np.asarray(training_stream(n_docs, seed), dtype=np.int64)


def load_token_stream(
    data: str | Path = SYNTHETIC, *, seed: int = 0, n_docs: int = DEFAULT_SYNTHETIC_DOCS
) -> np.ndarray:
    """All token ids of the training source as one int64 array (byte tokens, vocabulary 256)."""
    if str(data) == SYNTHETIC:
        tokens = _synthetic_tokens(n_docs, seed)
    else:
        tokens = _text_file_tokens(Path(data))
    if tokens.size and (tokens.min() < 0 or tokens.max() >= VOCAB_SIZE):
        raise InputFormatError(
            f"token ids must lie in [0, {VOCAB_SIZE}); the source {data!s} gave {tokens.min()}..{tokens.max()}"
        )
    return tokens


@dataclass(frozen=True)
class BlockSplits:
    """Training and validation blocks, each an int64 array of shape (n_blocks, T+1)."""

    train: np.ndarray
    val: np.ndarray
    seq_len: int

    @property
    def n_train(self) -> int:
        return int(self.train.shape[0])

    @property
    def n_val(self) -> int:
        return int(self.val.shape[0])


def cut_blocks(tokens: np.ndarray, seq_len: int) -> np.ndarray:
    """Consecutive non-overlapping blocks of T+1 tokens; floor((N-1)/T) of them."""
    if seq_len < 1:
        raise ConfigError(f"seq_len must be a positive integer, got {seq_len}")
    n_blocks = max(0, (int(tokens.size) - 1) // seq_len)
    if n_blocks == 0:
        return np.zeros((0, seq_len + 1), dtype=np.int64)
    idx = np.arange(n_blocks)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return tokens[idx]


def split_blocks(
    tokens: np.ndarray, seq_len: int, *, val_fraction: float = 0.1, min_val_blocks: int = 1
) -> BlockSplits:
    """Cut the stream into blocks and hold out the last ones for validation."""
    blocks = cut_blocks(tokens, seq_len)
    n = blocks.shape[0]
    n_val = max(min_val_blocks, int(round(n * val_fraction)))
    if n - n_val < 1:
        raise InputFormatError(
            f"the training data has {tokens.size} tokens, {n} blocks of {seq_len + 1}; at least {n_val + 1} blocks "
            f"are needed (one to train, {n_val} to validate): use a longer text or more synthetic documents"
        )
    return BlockSplits(train=blocks[: n - n_val], val=blocks[n - n_val :], seq_len=seq_len)


def batch_indices(
    n_blocks: int, step: int, batch_size: int, *, seed: int, rank: int = 0, world_size: int = 1
) -> np.ndarray:
    """Indices of the training blocks of ``rank`` at global ``step`` (deterministic, restart-free)."""
    per_step = batch_size * world_size
    start = step * per_step + rank * batch_size
    positions = np.arange(start, start + batch_size)
    epochs = positions // n_blocks
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        perm = np.random.default_rng([int(seed), int(epoch)]).permutation(n_blocks)
        mask = epochs == epoch
        out[mask] = perm[positions[mask] % n_blocks]
    return out


def training_batch(
    splits: BlockSplits,
    step: int,
    batch_size: int,
    *,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of shape (batch_size, T) for one training step."""
    idx = batch_indices(splits.n_train, step, batch_size, seed=seed, rank=rank, world_size=world_size)
    block = torch.from_numpy(splits.train[idx]).to(device, non_blocking=True)
    return block[:, :-1], block[:, 1:]


def validation_batches(splits: BlockSplits, n_batches: int, batch_size: int, *, device: str | torch.device = "cpu"):
    """The first ``n_batches`` validation batches in order (the same blocks at every evaluation)."""
    n = min(splits.n_val, n_batches * batch_size)
    for start in range(0, n - batch_size + 1 if n >= batch_size else 1, batch_size):
        block = torch.from_numpy(splits.val[start : min(n, start + batch_size)]).to(device)
        if block.shape[0] == 0:
            break
        yield block[:, :-1], block[:, 1:]
