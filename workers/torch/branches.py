"""
Trunk plus branches (src/trainer/packing.ts packEpisodeBranches): an on-policy episode scored with
its tips as one tip-free trunk (the episode's steps without their tips, packed) and, per step that had
tips, a branch [tips, the rest of the step's prompt, its response] whose tokens see the trunk's first
`prefix` tokens and the branch's own earlier tokens, at positions prefix, prefix + 1, ... Each branch
token then has exactly the context and position it has in the step's own sequence, so its log-prob is
the same causal computation; the history is encoded once (in the trunk) instead of once per step.

How the model runs it, without a KV cache (Hugging Face drops caches inside gradient-checkpointed
layers): the SDPA attention function is wrapped (BranchAttention). While the trunk runs, the wrapper
keeps each layer's keys and values; while a batch of branches runs, each branch's queries attend to the
trunk's first `prefix` keys and values followed by the branch's own, causally (BranchAttention._branches).
Otherwise it passes every call through unchanged. On the CPU the two parts are two flash-attention passes
merged by their log-sum-exps (PrefixThenCausal); elsewhere one causal pass with placeholder queries.

Training: the trunk runs once with gradients; its keys and values are detached into leaf tensors that
the branch batches use, so each batch's backward stops there and frees its activations; the grads
gathered on the leaves are then sent through the trunk in one backward together with the trunk's own
loss. The result is the gradient of the same sum of per-token terms.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

# The CPU flash-attention kernel that also returns each query's log-sum-exp, and its backward (PyTorch >= 2.3).
_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BACKWARD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


class PrefixThenCausal(torch.autograd.Function):
    """
    Attention of a branch's queries q [1, H, W, D] over [prefix keys pk (all visible), its own keys k
    (causal)], as one softmax over both: a flash pass over each part, merged by their log-sum-exps
    (o = Σ_j exp(lse_j − lse)·o_j, lse = logaddexp(lse₁, lse₂)). Nothing is computed for the prefix's own
    positions. Backward: the kernel's backward of each part, given the merged output and log-sum-exp,
    gives that part's exact gradients (the softmax's row term Σ dO·O and the probabilities exp(s − lse)
    are those of the whole row); the query's are the sum of the two.
    """

    @staticmethod
    def forward(ctx, q, pk, pv, k, v, scale):
        o1, l1 = _FLASH(q, pk, pv, 0.0, False, scale=scale)
        o2, l2 = _FLASH(q, k, v, 0.0, True, scale=scale)
        lse = torch.logaddexp(l1, l2)
        out = o1 * torch.exp(l1 - lse).unsqueeze(-1) + o2 * torch.exp(l2 - lse).unsqueeze(-1)
        ctx.save_for_backward(q, pk, pv, k, v, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        q, pk, pv, k, v, out, lse = ctx.saved_tensors
        grad = grad.contiguous()
        dq1, dpk, dpv = _FLASH_BACKWARD(grad, q, pk, pv, out, lse, 0.0, False, scale=ctx.scale)
        dq2, dk, dv = _FLASH_BACKWARD(grad, q, k, v, out, lse, 0.0, True, scale=ctx.scale)
        return dq1 + dq2, dpk, dpv, dk, dv, None


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
        self.prefixes: list[int] = []
        # Two flash passes merged by log-sum-exp where the CPU kernel is there; False: the placeholder-query pass (check_branches.py
        # compares them; EMPO2_BRANCH_ATTENTION=placeholder picks it, for bench/tip-branches.ts).
        self.merge = _FLASH is not None and os.environ.get("EMPO2_BRANCH_ATTENTION") != "placeholder"

    def __call__(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, *args: Any, **kwargs: Any):
        if self.mode == "record":
            self.kv[module.layer_idx] = (key, value)
        elif self.mode == "branch":
            return self._branches(module, query, key, value, *args, **kwargs)
        return self.original(module, query, key, value, attention_mask, *args, **kwargs)

    def _branches(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any):
        """
        Row r (a branch, right-padded to the batch's width W) attends to the trunk's first prefixes[r] keys and
        causally to its own. Pads come after a row's tokens, so no real token sees them.
        """
        trunk_k, trunk_v = self.kv[module.layer_idx]
        plain = not args and not kwargs.get("dropout") and all(kwargs.get(k) is None for k in ("sliding_window", "softcap", "position_bias"))
        if self.merge and query.device.type == "cpu" and plain:
            return self._merged(module, query, key, value, trunk_k, trunk_v, kwargs.get("scaling")), None
        # One causal pass per row over keys [trunk[:P], branch] with P placeholder queries before the branch's (zeros, their
        # outputs dropped): SDPA's causal kernels skip the blocks above the diagonal, where an explicit mask would make them
        # compute every block.
        kwargs["is_causal"] = True
        rows = []
        for r, P in enumerate(self.prefixes):
            q = query[r : r + 1]
            q = torch.cat([q.new_zeros(q.shape[:2] + (P, q.shape[3])), q], dim=2)
            k = torch.cat([trunk_k[:, :, :P].to(key.dtype), key[r : r + 1]], dim=2)
            v = torch.cat([trunk_v[:, :, :P].to(value.dtype), value[r : r + 1]], dim=2)
            out, _ = self.original(module, q, k, v, None, *args, **kwargs)
            rows.append(out[:, P:])  # [1, W, heads, head_dim]: the layout the model expects back
        return torch.cat(rows, dim=0), None

    def _merged(self, module: torch.nn.Module, query, key, value, trunk_k, trunk_v, scale: Optional[float]) -> torch.Tensor:
        """_branches by PrefixThenCausal, row by row; keys and values repeated per query head (grouped-query attention)."""
        groups = getattr(module, "num_key_value_groups", 1)
        heads = lambda t: (t.repeat_interleave(groups, dim=1) if groups > 1 else t).contiguous()
        # The trunk's keys and values repeated once per call (layer), not once per row.
        longest = max(self.prefixes)
        tk, tv = heads(trunk_k[:, :, :longest].to(key.dtype)), heads(trunk_v[:, :, :longest].to(value.dtype))
        rows = []
        for r, P in enumerate(self.prefixes):
            q, k, v = query[r : r + 1].contiguous(), heads(key[r : r + 1]), heads(value[r : r + 1])
            if P == 0:
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
            else:
                out = PrefixThenCausal.apply(q, tk[:, :, :P], tv[:, :, :P], k, v, scale)
            rows.append(out.transpose(1, 2))  # [1, W, heads, head_dim]: the layout the model expects back
        return torch.cat(rows, dim=0)

    @contextlib.contextmanager
    def recording(self):
        """Keeps every layer's keys and values of the passes run inside (read them from `kv`)."""
        self.mode, self.kv = "record", {}
        try:
            yield self.kv
        finally:
            self.mode = None

    @contextlib.contextmanager
    def branching(self, kv: dict[int, tuple[torch.Tensor, torch.Tensor]], prefixes: list[int]):
        """Passes run inside (and a backward that recomputes them, under gradient checkpointing) see `kv` before their own tokens: row r its first prefixes[r]."""
        self.mode, self.kv, self.prefixes = "branch", kv, prefixes
        try:
            yield
        finally:
            self.mode, self.kv, self.prefixes = None, {}, []


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
    keep: torch.Tensor  # [n, W], True where the hidden state predicts a scored token
    targets: list[int]


def branch_batch(branches: list[Branch], pad_token: int) -> BranchBatch:
    """Right-padded rows of branches, at positions prefix, prefix + 1, ..."""
    n = len(branches)
    W = max(len(b.ids) for b in branches)
    ids = torch.full((n, W), pad_token, dtype=torch.long)
    positions = torch.zeros((n, W), dtype=torch.long)
    keep = torch.zeros((n, W), dtype=torch.bool)
    targets: list[int] = []
    for r, b in enumerate(branches):
        ids[r, : len(b.ids)] = torch.tensor(b.ids, dtype=torch.long)
        positions[r] = b.prefix + torch.arange(W)
        # The hidden state before each scored token predicts it (the first branch token is never scored).
        scored = [j for j, p in enumerate(b.policy_tokens) if p]
        keep[r, [j - 1 for j in scored]] = True
        targets.extend(b.ids[j] for j in scored)
    return BranchBatch(ids, positions, keep, targets)
