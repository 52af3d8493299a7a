#!/usr/bin/env python3
"""
Checks the batched decoding pieces (decoding.py) against plain references on random cases, for
src/policy/torch/decoding.test.ts; prints one JSON object of counts.

    python workers/torch/check_decoding.py TOKENIZER_JSON

- nucleus: the top-p set found among the top-k equals the one a full stable sort of the vocabulary
  gives (as the worker did before, and src/policy/sampling.ts does), with ties and masked tokens;
- draw: frequencies over 200,000 draws against the probabilities;
- TokenTries: the allowed sets and the walk equal a walk of a dict trie from the root over the prefix;
- ByteStops / StreamStops: the first token after which the decoded text (tokenizers' own decode of the
  whole prefix) contains a stop string.
"""
from __future__ import annotations

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoding import ByteStops, StreamStops, TokenTries, draw, nucleus, token_byte_table  # noqa: E402


def full_sort_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p * probs.sum(dim=-1, keepdim=True)
    keep[:, 0] = True
    return torch.zeros_like(keep).scatter(1, order, keep) & (probs > 0)


def check_nucleus(g: torch.Generator) -> dict:
    mismatches = 0
    cases = 300
    for trial in range(cases):
        V = int(torch.randint(2, 5000, (1,), generator=g))
        logits = torch.randn(4, V, generator=g) * float(torch.rand(1, generator=g) * 8)
        if trial % 3 == 0:
            logits = (logits * 2).round() / 2  # many exact ties
        if trial % 5 == 0:
            logits[:, torch.randperm(V, generator=g)[: V // 2]] = -math.inf  # constrained rows
        probs = torch.softmax(logits, dim=-1)
        top_p = float(torch.rand(1, generator=g))
        ids, values = nucleus(probs, top_p)
        mine = torch.zeros_like(probs, dtype=torch.bool).scatter(1, ids, values > 0)
        mismatches += int(not torch.equal(mine, full_sort_nucleus(probs, top_p)))
    return {"cases": cases, "mismatches": mismatches}


def check_draw(g: torch.Generator) -> dict:
    p = torch.tensor([0.1, 0.0, 0.55, 0.3, 0.0, 0.05])
    n = 200_000
    picks = draw((p * 3).repeat(n, 1), g)  # any scale
    freq = torch.bincount(picks, minlength=p.numel()).double() / n
    return {"max_abs_error": float((freq - p).abs().max()), "zero_probability_draws": int(freq[p == 0].sum() * n)}


def check_tries(g: torch.Generator) -> dict:
    mismatches = 0
    steps = 0
    for trial in range(60):
        V = 40
        B = 5
        allowed = []
        for b in range(B):
            if b == 0:
                allowed.append(None)
                continue
            seqs = [torch.randint(0, V, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist() + [V - 1] for _ in range(int(torch.randint(1, 8, (1,), generator=g)))]
            allowed.append(seqs)
        tries = TokenTries(allowed, torch.device("cpu"))
        prefixes: list[list[int]] = [[] for _ in range(B)]
        done = torch.zeros(B, dtype=torch.bool)
        for _ in range(7):
            mask = tries.allowed(V)
            choice = []
            for b in range(B):
                expected = reference_allowed(allowed[b], prefixes[b])
                got = set(range(V)) if mask is None else set(torch.nonzero(mask[b]).flatten().tolist())
                if not done[b]:
                    steps += 1
                    mismatches += int(got != (expected or set(range(V))))
                pool = sorted(expected) if expected else list(range(V))
                choice.append(pool[int(torch.randint(0, len(pool), (1,), generator=g))])
            c = torch.tensor(choice)
            done |= c == V - 1
            tries.advance(c, done)
            for b in range(B):
                prefixes[b].append(choice[b])
    return {"steps": steps, "mismatches": mismatches}


def reference_allowed(seqs, prefix) -> set[int]:
    if not seqs:
        return set()
    root: dict = {}
    for s in seqs:
        node = root
        for t in s:
            node = node.setdefault(t, {})
    node = root
    for t in prefix:
        node = node.get(t) if node is not None else None
        if node is None:
            return set()
    return set(node.keys())


def check_stops(g: torch.Generator, tokenizer_path: str) -> dict:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    table = token_byte_table(tok, vocab)
    texts = ["café → naïve", "the red box", "\n\n", "<|im_end|>", "日本語", "go to kitchen"]
    pool = sorted({i for t in texts for i in tok.encode(t, add_special_tokens=False).ids} | set(range(min(vocab, 300))))
    stop_sets = [["é"], ["→"], ["red b", "x\n"], ["\n\n"], ["本語"], ["<|im_end|>"], ["e", "ab"], ["o t"]]
    out = {"byte_table": table is not None}
    for name in ("bytes", "stream"):
        mismatches = hits = 0
        for trial in range(120):
            stops = stop_sets[trial % len(stop_sets)]
            B, T = 6, 16
            seq = torch.tensor(pool)[torch.randint(0, len(pool), (B, T), generator=g)]
            checker = ByteStops(table, stops, B, torch.device("cpu")) if name == "bytes" else StreamStops(tok, stops, B)
            first: list = [None] * B
            for t in range(T):
                hit = checker.step(seq[:, t])
                for b in range(B):
                    if hit[b] and first[b] is None:
                        first[b] = t
            for b in range(B):
                ref = next((t for t in range(T) if any(s in tok.decode(seq[b, : t + 1].tolist(), skip_special_tokens=False) for s in stops)), None)
                mismatches += int(ref != first[b])
                hits += int(ref is not None)
        out[name] = {"rows": 120 * 6, "mismatches": mismatches, "hits": hits}
    return out


def main() -> None:
    g = torch.Generator().manual_seed(0)
    print(json.dumps({"nucleus": check_nucleus(g), "draw": check_draw(g), "tries": check_tries(g), "stops": check_stops(g, sys.argv[1])}))


if __name__ == "__main__":
    main()
