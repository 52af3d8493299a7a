#!/usr/bin/env python3
"""
Checks BranchAttention's branch pass (branches.py) against a dense-mask reference on random cases, for
src/policy/torch/branches.test.ts; prints one JSON object of the largest differences.

    python workers/torch/check_branches.py

Each case: a batch of branches (right-padded to one width, each with its own trunk prefix, 0 included),
grouped-query heads (1 or 3 query heads per key/value head), fp64 and fp32. Both of the wrapper's forms
(two flash passes merged by log-sum-exp, and one causal pass with placeholder queries) are compared,
values and gradients of the queries, the branch keys and values and the trunk keys and values (leaves,
as in training), with what scaled_dot_product_attention gives under an explicit mask over
[trunk[:P], branch] with each key's head repeated. Pad rows' outputs are left out (nobody reads them).
"""
from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from branches import BranchAttention  # noqa: E402


def reference(q, k, v, tk, tv, prefixes, lengths, groups, scale):
    """Row r's first lengths[r] outputs [len, H, D]: softmax over trunk[:P] (all) and the branch (causal)."""
    rows = []
    for r, (P, n) in enumerate(zip(prefixes, lengths)):
        K = torch.cat([tk[:, :, :P], k[r : r + 1, :, :n]], 2).repeat_interleave(groups, 1)
        V = torch.cat([tv[:, :, :P], v[r : r + 1, :, :n]], 2).repeat_interleave(groups, 1)
        mask = torch.ones(n, P + n, dtype=torch.bool)
        mask[:, P:] = torch.tril(torch.ones(n, n, dtype=torch.bool))
        out = torch.nn.functional.scaled_dot_product_attention(q[r : r + 1, :, :n], K, V, attn_mask=mask, scale=scale)
        rows.append(out[0].transpose(0, 1))
    return rows


def grads(outputs, grads_out, inputs):
    """Gradients of Σ out·grad_out; zeros for an input nothing used (a trunk no row reads)."""
    got = torch.autograd.grad(sum((o * go).sum() for o, go in zip(outputs, grads_out)), inputs, allow_unused=True)
    return [torch.zeros_like(x) if d is None else d for d, x in zip(got, inputs)]


def main() -> None:
    g = torch.Generator().manual_seed(0)
    worst: dict[str, dict[str, float]] = {}
    cases = 0
    for dtype in (torch.float64, torch.float32):
        for groups in (1, 3):
            for _ in range(6):
                kv_heads, D = 2, 8
                H = kv_heads * groups
                T = int(torch.randint(1, 60, (1,), generator=g))
                n = int(torch.randint(1, 5, (1,), generator=g))
                lengths = [int(torch.randint(1, 40, (1,), generator=g)) for _ in range(n)]
                prefixes = [int(torch.randint(0, T + 1, (1,), generator=g)) for _ in range(n)]
                prefixes[0] = 0 if cases % 3 == 0 else prefixes[0]
                W = max(lengths)
                rand = lambda *shape: (torch.randn(*shape, generator=g, dtype=torch.float64) * 1.5).to(dtype).requires_grad_()
                q, k, v = rand(n, H, W, D), rand(n, kv_heads, W, D), rand(n, kv_heads, W, D)
                tk, tv = rand(1, kv_heads, T, D), rand(1, kv_heads, T, D)
                grads_out = [torch.randn(m, H, D, generator=g, dtype=torch.float64).to(dtype) for m in lengths]
                scale = D**-0.5
                want = reference(q, k, v, tk, tv, prefixes, lengths, groups, scale)
                wanted_grads = grads(want, grads_out, (q, k, v, tk, tv))
                module = SimpleNamespace(layer_idx=0, num_key_value_groups=groups, is_causal=True)
                for merge in (True, False):
                    attention = BranchAttention(sdpa_attention_forward)
                    attention.merge = merge
                    with attention.branching({0: (tk, tv)}, prefixes):
                        out, _ = attention(module, q, k, v, None, dropout=0.0, scaling=scale, sliding_window=None)
                    got = [out[r, :m] for r, m in enumerate(lengths)]
                    got_grads = grads(got, grads_out, (q, k, v, tk, tv))
                    key = f"{'merged' if merge else 'placeholder'}_{str(dtype).removeprefix('torch.')}"
                    w = worst.setdefault(key, {"output": 0.0, "grad_query": 0.0, "grad_key": 0.0, "grad_value": 0.0, "grad_trunk_key": 0.0, "grad_trunk_value": 0.0})
                    w["output"] = max(w["output"], max(float((a - b).detach().abs().max()) for a, b in zip(got, want)))
                    for name, a, b in zip(("grad_query", "grad_key", "grad_value", "grad_trunk_key", "grad_trunk_value"), got_grads, wanted_grads):
                        w[name] = max(w[name], float((a - b).abs().max()))
                cases += 1
    print(json.dumps({"cases": cases, "max_abs_difference": worst}))


if __name__ == "__main__":
    main()
