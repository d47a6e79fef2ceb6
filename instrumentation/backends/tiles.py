"""The query-block / key-span tiling of a sliding-window band, and the masks of its tiles."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from .windows import clamp_window

TILE_MASK_CACHE_SIZE = 512
_tile_masks: OrderedDict[tuple, torch.Tensor] = OrderedDict()


@dataclass(frozen=True)
class Tile:
    """Query rows [q0, q1) attend keys [k0, q1): the smallest key span covering their bands.

    Inside the tile only two column ranges can hold blocked positions: keys left of some
    row's window (columns [0, left)) and keys after some row's query (columns [right, cols)).
    The columns in between are inside every row's band.
    """

    q0: int
    q1: int
    k0: int
    window: int

    @property
    def rows(self) -> int:
        return self.q1 - self.q0

    @property
    def cols(self) -> int:
        return self.q1 - self.k0

    @property
    def left(self) -> int:
        # key k0 + c is left of the window of the last row iff k0 + c < q1 - W
        return max(0, self.q1 - self.window - self.k0)

    @property
    def right(self) -> int:
        # key k0 + c is after the query of the first row iff k0 + c > q0
        return min(self.cols, self.q0 + 1 - self.k0)


def band_tiles(seq_len: int, window: int, block: int) -> list[Tile]:
    """Tiles of one head's band: query blocks of ``block`` rows (the last may be shorter)."""
    w = clamp_window(window, seq_len)
    tiles = []
    for q0 in range(0, seq_len, block):
        q1 = min(seq_len, q0 + block)
        tiles.append(Tile(q0, q1, max(0, q0 - w + 1), w))
    return tiles


def tile_elements(seq_len: int, window: int, block: int) -> int:
    """Score elements computed for one head by the tiling."""
    return sum(t.rows * t.cols for t in band_tiles(seq_len, window, block))


def tile_blocked_mask(tile: Tile, device) -> torch.Tensor:
    """Boolean (rows, cols) mask of the tile's positions OUTSIDE the band (True = blocked).

    Row r is query q0 + r, column c is key k0 + c; the band allows k0 + c <= q0 + r and
    k0 + c >= q0 + r - W + 1. Cached, since all steady-state tiles share one mask.
    """
    device = torch.device(device)
    key = (tile.rows, tile.cols, tile.q0 - tile.k0, tile.window, device.type, device.index)
    mask = _tile_masks.get(key)
    if mask is not None:
        _tile_masks.move_to_end(key)
        return mask
    rel = (torch.arange(tile.rows, device=device) + (tile.q0 - tile.k0)).view(-1, 1) - torch.arange(
        tile.cols, device=device
    ).view(1, -1)  # query - key
    mask = (rel < 0) | (rel >= tile.window)
    _tile_masks[key] = mask
    while len(_tile_masks) > TILE_MASK_CACHE_SIZE:
        _tile_masks.popitem(last=False)
    return mask


def mask_tile_(scores: torch.Tensor, tile: Tile, fill: float) -> torch.Tensor:
    """Fill the blocked positions of a (N, rows, cols) score tile in place (only its edge columns)."""
    mask = tile_blocked_mask(tile, scores.device)
    left, right = tile.left, tile.right
    if left >= right:  # the edge ranges meet: mask the whole tile at once
        return scores.masked_fill_(mask, fill)
    if left > 0:
        scores[:, :, :left].masked_fill_(mask[:, :left], fill)
    if right < tile.cols:
        scores[:, :, right:].masked_fill_(mask[:, right:], fill)
    return scores
