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
from typing import Optional, Sequence

import torch


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


def assemble(prefixes: Sequence[Optional[torch.Tensor]], lengths: Sequence[int]) -> Optional[list[tuple[torch.Tensor, torch.Tensor]]]:
    """
    Batched per-layer (keys, values) [B, kv_heads, C, head_dim] with row b's first lengths[b]
    cached positions right-aligned at column C = max(lengths); None when nothing is reused.
    """
    width = max(lengths, default=0)
    if width == 0:
        return None
    sample = next(p for p, n in zip(prefixes, lengths) if n > 0)
    layers, _, heads, _, dim = sample.shape
    buf = torch.zeros((layers, 2, len(lengths), heads, width, dim), dtype=sample.dtype, device=sample.device)
    for b, (prefix, n) in enumerate(zip(prefixes, lengths)):
        if n > 0:
            buf[:, :, b, :, width - n :] = prefix[:, :, :, :n]
    return [(buf[layer, 0], buf[layer, 1]) for layer in range(layers)]


def extract(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], row: int, columns: torch.Tensor) -> torch.Tensor:
    """Row `row`'s keys and values at `columns` of a batched cache, as one [layers, 2, heads, n, dim] tensor."""
    return torch.stack([torch.stack([k[row].index_select(1, columns), v[row].index_select(1, columns)]) for k, v in layers])
