"""
Per-sequence KV caches kept between `generate` calls (an episode's steps), so that a step prefills
only the tokens after the longest common prefix of its prompt and what the cache already holds.

Rows of one call may hold caches of different lengths and add different numbers of new tokens.
They still run as one batch: every row's cache is right-aligned at column C (the longest reused
prefix) and every row's new tokens are right-aligned at column C + N (the most new tokens), so a
row is `[pad | cached r_b | pad | new n_b]`; the attention mask hides the pads and explicit
position ids keep each token at its own position. Decoding then appends one column per step to
every row. Column-wise causality (a query sees columns left of it) is exactly each row's own
causal order, so the result is the computation without the cache, up to floating-point rounding.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass
class CachedPrefix:
    tokens: torch.Tensor  # int64 [n]: the tokens whose keys and values are held, in order
    kv: torch.Tensor  # [layers, 2, kv_heads, n, head_dim]

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size() + self.tokens.numel() * self.tokens.element_size()


def common_prefix(held: torch.Tensor, prompt: torch.Tensor) -> int:
    n = min(held.numel(), prompt.numel())
    if n == 0:
        return 0
    differ = (held[:n] != prompt[:n]).nonzero()
    return int(differ[0, 0]) if differ.numel() > 0 else n


class PrefixCache:
    """
    The kept caches, by key, least recently used first. At most `max_bytes` are held: storing evicts
    the least recently used keys (those not part of the current call first, as the call's own rows
    are the ones the next call will want); an entry larger than the whole budget is not kept.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[str, CachedPrefix] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> Optional[CachedPrefix]:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: CachedPrefix, protected: frozenset[str] = frozenset()) -> None:
        self.drop(key)
        if entry.nbytes > self.max_bytes:
            return
        while self.bytes + entry.nbytes > self.max_bytes:
            victim = next((k for k in self.entries if k not in protected), None) or next(iter(self.entries))
            self.drop(victim)
        self.entries[key] = entry
        self.bytes += entry.nbytes

    def drop(self, key: str) -> bool:
        entry = self.entries.pop(key, None)
        if entry is None:
            return False
        self.bytes -= entry.nbytes
        return True

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def stats(self) -> dict[str, int]:
        return {"keys": len(self.entries), "bytes": self.bytes, "max_bytes": self.max_bytes}


class LayerStorage:
    """One layer's keys and values for a whole call: [rows, heads, capacity, head_dim], allocated on first write."""

    def __init__(self, rows: int, capacity: int) -> None:
        self.rows = rows
        self.capacity = capacity
        self.keys: Optional[torch.Tensor] = None
        self.values: Optional[torch.Tensor] = None

    def allocate(self, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        if self.keys is None:
            self.keys = torch.zeros((self.rows, heads, self.capacity, head_dim), dtype=dtype, device=device)
            self.values = torch.zeros_like(self.keys)


class GrowingLayer(DynamicLayer):
    """
    A cache layer over rows [start, end) of a LayerStorage that appends in place: keys / values are
    views of the filled columns. DynamicLayer concatenates, copying the whole cache every decoding
    step, which with 1-4k-token prompts costs more than the step's own computation; views of one
    storage also let groups of rows prefill separately into the same batched cache.
    """

    def __init__(self, storage: LayerStorage, start: int, end: int, filled: int) -> None:
        super().__init__()
        self.storage, self.start, self.end = storage, start, end
        self.filled = filled
        if storage.keys is not None:
            self._view()

    def _view(self) -> None:
        self.dtype, self.device = self.storage.keys.dtype, self.storage.keys.device
        self.keys = self.storage.keys[self.start : self.end, :, : self.filled]
        self.values = self.storage.values[self.start : self.end, :, : self.filled]
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return self.filled

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        n = key_states.shape[-2]
        if self.filled + n > self.storage.capacity:
            # The caller sizes the capacity for the whole call (prompt + max_tokens); more is a bug.
            raise RuntimeError(f"GrowingLayer: {self.filled} + {n} positions exceed the capacity {self.storage.capacity}")
        self.storage.allocate(key_states.shape[1], key_states.shape[-1], key_states.dtype, key_states.device)
        self.storage.keys[self.start : self.end, :, self.filled : self.filled + n] = key_states
        self.storage.values[self.start : self.end, :, self.filled : self.filled + n] = value_states
        self.filled += n
        self._view()
        return self.keys, self.values


class BatchedCache:
    """
    The keys and values of one batched call: row b's first lengths[b] kept positions right-aligned at
    column C = max(lengths), room for `capacity` columns. `rows(start, end, filled)` is a transformers
    cache over some rows that writes into the same storage.
    """

    def __init__(self, config: Any, prefixes: Sequence[Optional[torch.Tensor]], lengths: Sequence[int], capacity: int) -> None:
        self.config = config
        self.layers = [LayerStorage(len(lengths), capacity) for _ in DynamicCache(config=config).layers]
        self.width = max(lengths, default=0)
        if self.width == 0:
            return
        sample = next(p for p, n in zip(prefixes, lengths) if n > 0)
        _, _, heads, _, dim = sample.shape
        for index, storage in enumerate(self.layers):
            storage.allocate(heads, dim, sample.dtype, sample.device)
            for b, (prefix, n) in enumerate(zip(prefixes, lengths)):
                if n > 0:
                    storage.keys[b, :, self.width - n : self.width] = prefix[index, 0, :, :n]
                    storage.values[b, :, self.width - n : self.width] = prefix[index, 1, :, :n]

    def rows(self, start: int, end: int, filled: int) -> DynamicCache:
        cache = DynamicCache(config=self.config)
        cache.layers = [GrowingLayer(storage, start, end, filled) for storage in self.layers]
        return cache


def prefill_groups(lengths: Sequence[int], max_padding: float = 0.15) -> list[tuple[int, int]]:
    """
    Consecutive groups [start, end) of rows sorted longest first, each row padded by at most
    `max_padding` of its group's longest: rows prefill group by group (padding is computation spent
    on nothing, and new-token counts differ a lot between an episode's first step and the next).
    """
    groups: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(lengths) + 1):
        if i == len(lengths) or lengths[i] < (1 - max_padding) * lengths[start]:
            groups.append((start, i))
            start = i
    return groups


def extract(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], row: int, columns: torch.Tensor) -> torch.Tensor:
    """Row `row`'s keys and values at `columns` of a batched cache, as one [layers, 2, heads, n, dim] tensor."""
    return torch.stack([torch.stack([k[row].index_select(1, columns), v[row].index_select(1, columns)]) for k, v in layers])
