"""A key/value cache bounded per head by the windows a patched model executes (``WindowedKVCache``).

Each key/value head keeps only the positions its query heads' windows can reach: the last ``W``
(the newest query's window) for the largest window ``W`` among the query heads it serves (under grouped-query attention
several query heads share one key/value head, so the group keeps its largest window); a head with
full attention keeps everything. The windows are those the prompt's forward executed; the patched
attention hands them over when it stores the prompt (``fill``) and reads the kept positions back at
every later forward (``extend``). As a Hugging Face ``Cache`` it goes to ``generate`` unchanged:

    from instrumentation.retrofit import WindowedKVCache
    out = model.generate(ids, cache=WindowedKVCache(), max_new_tokens=64)

With sink tokens (``sink_tokens = k``, method §10.4) every windowed head also keeps the first k
positions of the sequence, which every query sees besides its window (as StreamingLLM's cache does).

Masks are built for the full sequence (``get_mask_sizes``); the patched attention reads the columns of
the positions each group kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from aah_viz.errors import ConfigError
from instrumentation.backends.windows import bucket_heads
from instrumentation.retrofit.decode import KVGroup


def kv_reach(windows: Sequence[int | None], n_kv: int) -> list[int | None]:
    """Per key/value head, the largest window of the query heads it serves (None: full attention);
    query head h reads key/value head h // (H / n_kv), as ``repeat_kv`` pairs them."""
    groups = len(windows) // n_kv
    reach: list[int | None] = []
    for g in range(n_kv):
        mine = windows[g * groups : (g + 1) * groups]
        reach.append(None if any(w is None for w in mine) else max(int(w) for w in mine))
    return reach


def _last(x: torch.Tensor, keep: int | None) -> torch.Tensor:
    """The last ``keep`` positions of (B, n, T, D) (all of them for None)."""
    if keep is None or x.shape[2] <= keep:
        return x
    return x[:, :, x.shape[2] - keep :]


class _Part:
    """One bucket of key/value heads: the first ``sink`` positions and the newest ones it keeps."""

    def __init__(self, heads: list[int], idx: torch.Tensor, reach: int | None, head_kv, tail_kv):
        self.heads, self.idx, self.reach = heads, idx, reach
        self.head_k, self.head_v = head_kv  # positions 0 .. first - 1 (sink tokens; empty without)
        self.tail_k, self.tail_v = tail_kv  # the newest positions

    @property
    def first(self) -> int:
        return int(self.head_k.shape[2])

    def group(self) -> KVGroup:
        if not self.first:
            return (self.heads, self.tail_k, self.tail_v, 0)
        keys = torch.cat([self.head_k, self.tail_k], dim=2)
        return (self.heads, keys, torch.cat([self.head_v, self.tail_v], dim=2), self.first)

    def map(self, fn) -> None:
        self.head_k, self.head_v, self.tail_k, self.tail_v = (
            fn(x) for x in (self.head_k, self.head_v, self.tail_k, self.tail_v)
        )

    def tensors(self) -> list[torch.Tensor]:
        return [self.head_k, self.head_v, self.tail_k, self.tail_v]


class WindowedLayer(CacheLayerMixin):
    """One layer's cache: key/value heads bucketed by the positions they keep."""

    is_sliding = False  # masks are built for the whole sequence; the attention reads the kept columns
    is_croppable = False

    def __init__(self, **kwargs):
        super().__init__()
        self.seen = 0
        self.sinks = 0
        self.parts: list[_Part] = []

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    def fill(self, keys: torch.Tensor, values: torch.Tensor, reach: Sequence[int | None], sinks: int = 0) -> None:
        """Store the prompt's keys and values (B, n_kv, T, D), each head its last ``reach`` positions and, with
        ``sinks`` k, the first k (a head with full attention keeps everything anyway)."""
        self.lazy_initialization(keys, values)
        self.seen = int(keys.shape[2])
        self.sinks = max(0, int(sinks))
        self.parts = []
        for r, heads in bucket_heads(list(reach)):
            idx = torch.as_tensor(heads, device=keys.device)
            k, v = (x.index_select(1, idx) for x in (keys, values))
            first = 0 if r is None else min(self.sinks, self.seen)
            tail = None if r is None else max(0, min(r, self.seen - first))
            self.parts.append(
                _Part(
                    heads,
                    idx,
                    r,
                    (k[:, :, :first].clone(), v[:, :, :first].clone()),
                    (_last(k[:, :, first:], tail).clone(), _last(v[:, :, first:], tail).clone()),
                )
            )

    def extend(self, keys: torch.Tensor, values: torch.Tensor) -> list[KVGroup]:
        """Append a later forward's keys and values (B, n_kv, Tq, D); per bucket, the positions its windows
        reach from the new queries (the kept sink positions, the last ``reach - 1`` kept ones and the new
        ones), which it then holds."""
        if not self.parts:
            raise ConfigError(
                "WindowedKVCache: this layer holds no prompt; the cache serves a model patched by patch_model"
            )
        self.seen += int(keys.shape[2])
        for part in self.parts:
            prev = None if part.reach is None else part.reach - 1
            new_k, new_v = (x.index_select(1, part.idx) for x in (keys, values))
            part.tail_k = torch.cat([_last(part.tail_k, prev), new_k], dim=2)
            part.tail_v = torch.cat([_last(part.tail_v, prev), new_v], dim=2)
            grow = 0 if part.reach is None else min(self.sinks, self.seen) - part.first
            if grow > 0:  # a prompt shorter than k: every position so far is kept, the earliest become sinks
                part.head_k = torch.cat([part.head_k, part.tail_k[:, :, :grow]], dim=2)
                part.head_v = torch.cat([part.head_v, part.tail_v[:, :, :grow]], dim=2)
                part.tail_k, part.tail_v = part.tail_k[:, :, grow:].clone(), part.tail_v[:, :, grow:].clone()
        return [part.group() for part in self.parts]

    def update(self, key_states, value_states, *args, **kwargs):
        raise ConfigError(
            "WindowedKVCache keeps keys per head for a model patched by instrumentation.retrofit.patch_model; "
            "an unpatched attention cannot use it"
        )

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen + query_length, 0

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.parts, self.seen, self.sinks, self.is_initialized = [], 0, 0, False

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise ConfigError("WindowedKVCache cannot be cropped: the positions beyond each window are gone")

    def _batch(self, fn) -> None:
        for part in self.parts:
            part.map(fn)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._batch(lambda x: x.index_select(0, beam_idx.to(x.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._batch(lambda x: x.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._batch(lambda x: x[indices])

    def tensors(self) -> list[torch.Tensor]:
        return [t for part in self.parts for t in part.tensors()]


class WindowedKVCache(Cache):
    """A ``Cache`` whose every head keeps only the keys and values its window can reach (module docstring)."""

    def __init__(self):
        super().__init__(layer_class_to_replicate=WindowedLayer)

    def layer(self, layer_idx: int) -> WindowedLayer:
        while len(self.layers) <= layer_idx:
            self.layers.append(WindowedLayer())
        return self.layers[layer_idx]

    def fill(self, layer_idx: int, keys, values, reach: Sequence[int | None], sinks: int = 0) -> None:
        self.layer(layer_idx).fill(keys, values, reach, sinks)

    def extend(self, layer_idx: int, keys, values) -> list[KVGroup]:
        return self.layer(layer_idx).extend(keys, values)


def cache_bytes(cache: Cache) -> int:
    """Bytes of the storage a cache holds (each storage once): a ``WindowedKVCache`` or a Hugging Face cache."""
    seen, total = set(), 0
    for layer in cache.layers:
        held = layer.tensors() if isinstance(layer, WindowedLayer) else [layer.keys, layer.values]
        for t in held:
            if t is None:
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total
