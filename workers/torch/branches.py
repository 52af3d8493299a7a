"""
Trunk plus branches (src/trainer/packing.ts packEpisodeBranches): an on-policy episode scored with
its tips as one tip-free trunk (the episode's steps without their tips, packed) and, per step that had
tips, a branch [tips, the rest of the step's prompt, its response] whose tokens see the trunk's first
`prefix` tokens and the branch's own earlier tokens, at positions prefix, prefix + 1, ... Each branch
token then has exactly the context and position it has in the step's own sequence, so its log-prob is
the same causal computation; the history is encoded once (in the trunk) instead of once per step.

How the model runs it, without a KV cache (Hugging Face drops caches inside gradient-checkpointed
layers): the SDPA attention function is wrapped (BranchAttention). While the trunk runs, the wrapper
keeps each layer's keys and values; while a batch of branches runs, it puts the trunk's keys and values
before the branches' own and applies a mask that hides trunk positions >= prefix per branch (and keeps
each branch causal). Otherwise it passes every call through unchanged.

Training: the trunk runs once with gradients; its keys and values are detached into leaf tensors that
the branch batches use, so each batch's backward stops there and frees its activations; the grads
gathered on the leaves are then sent through the trunk in one backward together with the trunk's own
loss. The result is the gradient of the same sum of per-token terms.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch


@dataclass
class Branch:
    prefix: int
    ids: list[int]
    policy_tokens: list[int]

    @property
    def scored(self) -> int:
        return sum(self.policy_tokens)


class BranchAttention:
    """The SDPA attention function with the two modes above; pass-through when no mode is set."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original
        self.mode: Optional[str] = None  # None, "record" or "branch"
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.mask: Optional[torch.Tensor] = None

    def __call__(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, *args: Any, **kwargs: Any):
        if self.mode == "record":
            self.kv[module.layer_idx] = (key, value)
        elif self.mode == "branch":
            trunk_k, trunk_v = self.kv[module.layer_idx]
            n = key.shape[0]
            key = torch.cat([trunk_k.to(key.dtype).expand(n, -1, -1, -1), key], dim=2)
            value = torch.cat([trunk_v.to(value.dtype).expand(n, -1, -1, -1), value], dim=2)
            kwargs["is_causal"] = False
            return self.original(module, query, key, value, self.mask, *args, **kwargs)
        return self.original(module, query, key, value, attention_mask, *args, **kwargs)

    @contextlib.contextmanager
    def recording(self):
        """Keeps every layer's keys and values of the passes run inside (read them from `kv`)."""
        self.mode, self.kv = "record", {}
        try:
            yield self.kv
        finally:
            self.mode = None

    @contextlib.contextmanager
    def branching(self, kv: dict[int, tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor):
        """Passes run inside (and a backward that recomputes them, under gradient checkpointing) see `kv` before their own tokens, under `mask`."""
        self.mode, self.kv, self.mask = "branch", kv, mask
        try:
            yield
        finally:
            self.mode, self.kv, self.mask = None, {}, None


def install(attention_functions: Any) -> BranchAttention:
    """Wraps the registered SDPA function (transformers' ALL_ATTENTION_FUNCTIONS) once; returns the wrapper."""
    current = attention_functions["sdpa"]
    if isinstance(current, BranchAttention):
        return current
    wrapper = BranchAttention(current)
    attention_functions["sdpa"] = wrapper
    return wrapper


@dataclass
class BranchBatch:
    ids: torch.Tensor  # [n, W]
    positions: torch.Tensor  # [n, W]
    mask: torch.Tensor  # [n, 1, W, T + W], True: attend
    keep: torch.Tensor  # [n, W], True where the hidden state predicts a scored token
    targets: list[int]


def branch_batch(branches: list[Branch], trunk_len: int, pad_token: int) -> BranchBatch:
    """Right-padded rows of branches; pads see what the token before them sees and themselves (no empty row)."""
    n = len(branches)
    W = max(len(b.ids) for b in branches)
    ids = torch.full((n, W), pad_token, dtype=torch.long)
    positions = torch.zeros((n, W), dtype=torch.long)
    mask = torch.zeros((n, 1, W, trunk_len + W), dtype=torch.bool)
    keep = torch.zeros((n, W), dtype=torch.bool)
    causal = torch.ones((W, W), dtype=torch.bool).tril()
    targets: list[int] = []
    for r, b in enumerate(branches):
        m = len(b.ids)
        ids[r, :m] = torch.tensor(b.ids, dtype=torch.long)
        positions[r] = b.prefix + torch.arange(W)
        mask[r, 0, :, : b.prefix] = True
        mask[r, 0, :, trunk_len:] = causal
        # The hidden state before each scored token predicts it (the first branch token is never scored).
        scored = [j for j, p in enumerate(b.policy_tokens) if p]
        keep[r, [j - 1 for j in scored]] = True
        targets.extend(b.ids[j] for j in scored)
    return BranchBatch(ids, positions, mask, keep, targets)
