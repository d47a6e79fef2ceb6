"""Boolean band masks with an LRU cache keyed by (T, W, device type, device index[, sink tokens])."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

import torch

from .windows import clamp_window

DEFAULT_CACHE_SIZE = 16


class BandMaskCache:
    """LRU of T x T band masks (method section 10.1, step 4); records hits, misses and build time."""

    def __init__(self, capacity: int = DEFAULT_CACHE_SIZE):
        self.capacity = max(1, int(capacity))
        self._masks: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.build_seconds = 0.0

    def get(self, seq_len: int, window: int, device, sinks: int = 0) -> torch.Tensor:
        device = torch.device(device)
        w = clamp_window(window, seq_len)
        sinks = 0 if w >= seq_len else max(0, int(sinks))
        key = (int(seq_len), w, device.type, device.index) + ((sinks,) if sinks else ())
        with self._lock:
            mask = self._masks.get(key)
            if mask is not None:
                self._masks.move_to_end(key)
                self.hits += 1
                return mask
        start = time.perf_counter()
        mask = band_mask(seq_len, w, device, sinks)
        elapsed = time.perf_counter() - start
        with self._lock:
            self.misses += 1
            self.build_seconds += elapsed
            self._masks[key] = mask
            self._masks.move_to_end(key)
            while len(self._masks) > self.capacity:
                self._masks.popitem(last=False)
        return mask

    def __len__(self) -> int:
        return len(self._masks)

    def clear(self) -> None:
        with self._lock:
            self._masks.clear()
            self.hits = self.misses = 0
            self.build_seconds = 0.0


def band_mask(seq_len: int, window: int, device=None, sinks: int = 0) -> torch.Tensor:
    """Boolean (T, T) mask: key <= query and (key >= query - W + 1, or key < ``sinks``: the first positions
    every query keeps, method §10.4); W >= T is lower triangular."""
    w = clamp_window(window, seq_len)
    idx = torch.arange(seq_len, device=device)
    diff = idx.view(-1, 1) - idx.view(1, -1)  # query - key
    if w >= seq_len:
        return diff >= 0
    inside = diff < w
    if sinks:
        inside = inside | (idx.view(1, -1) < int(sinks))
    return (diff >= 0) & inside


MASK_CACHE = BandMaskCache(DEFAULT_CACHE_SIZE)
