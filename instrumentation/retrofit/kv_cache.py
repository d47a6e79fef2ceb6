"""A key/value cache bounded per head by the windows a patched model executes (``WindowedKVCache``).

Each key/value head keeps only the positions its query heads' windows can reach: the last ``W``
(the newest query's window) for the largest window ``W`` among the query heads it serves (under grouped-query attention
several query heads share one key/value head, so the group keeps its largest window); a head with
full attention keeps everything. The windows are those the prompt's forward executed; the patched
attention hands them over when it stores the prompt (``fill``) and reads the kept positions back at
every later forward (``extend``). As a Hugging Face ``Cache`` it goes to ``generate`` unchanged:

    from instrumentation.retrofit import WindowedKVCache
    out = model.generate(ids, cache=WindowedKVCache(), max_new_tokens=64)

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


class WindowedLayer(CacheLayerMixin):
    """One layer's cache: key/value heads bucketed by the positions they keep."""

    is_sliding = False  # masks are built for the whole sequence; the attention reads the kept columns
    is_croppable = False

    def __init__(self, **kwargs):
        super().__init__()
        self.seen = 0
        self.parts: list[tuple[list[int], torch.Tensor, int | None, torch.Tensor, torch.Tensor]] = []

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    def fill(self, keys: torch.Tensor, values: torch.Tensor, reach: Sequence[int | None]) -> None:
        """Store the prompt's keys and values (B, n_kv, T, D), each head its last ``reach`` positions."""
        self.lazy_initialization(keys, values)
        self.seen = int(keys.shape[2])
        self.parts = []
        for r, heads in bucket_heads(list(reach)):
            idx = torch.as_tensor(heads, device=keys.device)
            self.parts.append((heads, idx, r, *(_last(x.index_select(1, idx), r).clone() for x in (keys, values))))

    def extend(self, keys: torch.Tensor, values: torch.Tensor) -> list[KVGroup]:
        """Append a later forward's keys and values (B, n_kv, Tq, D); per bucket, the positions its windows
        reach from the new queries (the last ``reach - 1`` kept ones and the new ones), which it then holds."""
        if not self.parts:
            raise ConfigError(
                "WindowedKVCache: this layer holds no prompt; the cache serves a model patched by patch_model"
            )
        self.seen += int(keys.shape[2])
        parts = []
        for heads, idx, r, k, v in self.parts:
            prev = None if r is None else r - 1
            k = torch.cat([_last(k, prev), keys.index_select(1, idx)], dim=2)
            v = torch.cat([_last(v, prev), values.index_select(1, idx)], dim=2)
            parts.append((heads, idx, r, k, v))
        self.parts = parts
        return [(heads, k, v) for heads, _, _, k, v in parts]

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
        self.parts, self.seen, self.is_initialized = [], 0, False

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise ConfigError("WindowedKVCache cannot be cropped: the positions beyond each window are gone")

    def _batch(self, fn) -> None:
        self.parts = [(h, i, keep, fn(k), fn(v)) for h, i, keep, k, v in self.parts]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._batch(lambda x: x.index_select(0, beam_idx.to(x.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._batch(lambda x: x.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._batch(lambda x: x[indices])

    def tensors(self) -> list[torch.Tensor]:
        return [t for *_, k, v in self.parts for t in (k, v)]


class WindowedKVCache(Cache):
    """A ``Cache`` whose every head keeps only the keys and values its window can reach (module docstring)."""

    def __init__(self):
        super().__init__(layer_class_to_replicate=WindowedLayer)

    def layer(self, layer_idx: int) -> WindowedLayer:
        while len(self.layers) <= layer_idx:
            self.layers.append(WindowedLayer())
        return self.layers[layer_idx]

    def fill(self, layer_idx: int, keys, values, reach: Sequence[int | None]) -> None:
        self.layer(layer_idx).fill(keys, values, reach)

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
