"""
The per-token work of generation, batched over rows on the model's device: token choice (greedy,
temperature, top-p) with the unconstrained log-prob, constrained decoding through all rows' token
tries at once, and stop strings matched incrementally. Nothing here loops over rows in Python or
copies a full-vocabulary tensor to the host; each step costs one host sync (the trie's edge count)
only when a trie is live.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

# Stands for "no byte" in byte windows; real bytes are 0..255.
NO_BYTE = 256


class TokenTries:
    """
    Every row's prefix trie over its allowed responses (as src/policy/constrained.ts), flattened into
    one edge table: node i's children are edges offsets[i]..offsets[i+1] (token, child node). A row's
    state is its current node, or -1 when it is unconstrained (no trie, or its prefix left the trie:
    an empty allowed set means unconstrained, as in sampling.ts).
    """

    def __init__(self, allowed: Sequence[Optional[Sequence[Sequence[int]]]], device: torch.device) -> None:
        children: list[dict[int, int]] = []
        roots: list[int] = []
        for seqs in allowed:
            if not seqs:
                roots.append(-1)
                continue
            root = len(children)
            children.append({})
            roots.append(root)
            for seq in seqs:
                node = root
                for tok in seq:
                    nxt = children[node].get(tok)
                    if nxt is None:
                        nxt = len(children)
                        children[node][tok] = nxt
                        children.append({})
                    node = nxt
        offsets = [0]
        tokens: list[int] = []
        targets: list[int] = []
        for c in children:
            tokens.extend(c.keys())
            targets.extend(c.values())
            offsets.append(len(tokens))
        self.device = device
        self.offsets = torch.tensor(offsets, dtype=torch.long, device=device)
        self.tokens = torch.tensor(tokens, dtype=torch.long, device=device)
        self.targets = torch.tensor(targets, dtype=torch.long, device=device)
        self.state = torch.tensor(roots, dtype=torch.long, device=device)
        self.live = any(r >= 0 for r in roots)
        self._edges: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    def allowed(self, vocab: int) -> Optional[torch.Tensor]:
        """[B, V] bool of the tokens each row may take next (all of them for unconstrained rows), or None when no row is constrained."""
        if not self.live:
            return None
        state = self.state
        node = state.clamp(min=0)
        counts = torch.where(state >= 0, self.offsets[node + 1] - self.offsets[node], 0)
        total = int(counts.sum())
        if total == 0:
            self.live = False
            self._edges = None
            return None
        B = state.numel()
        rows = torch.repeat_interleave(torch.arange(B, device=self.device), counts, output_size=total)
        first = torch.cumsum(counts, 0) - counts
        edges = self.offsets[node][rows] + torch.arange(total, device=self.device) - first[rows]
        mask = (counts == 0)[:, None].expand(B, vocab).clone()
        mask[rows, self.tokens[edges]] = True
        self._edges = (rows, edges)
        return mask

    def advance(self, choice: torch.Tensor, done: torch.Tensor) -> None:
        if self._edges is None:
            return
        rows, edges = self._edges
        hit = self.tokens[edges] == choice[rows]
        state = torch.full_like(self.state, -1)
        state[rows[hit]] = self.targets[edges[hit]]
        self.state = torch.where(done, -1, state)


def choose(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    allowed: Optional[torch.Tensor],
    generator: Optional[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    Token choice as src/policy/sampling.ts: greedy at temperature 0, else softmax(logits / T) over the
    allowed tokens, cut to the top-p nucleus (ties by lower id), drawn by inverting the cumulative
    distribution with one uniform per row. The log-prob returned is the chosen token's under
    softmax(logits / T) over the whole vocabulary (T = 1 when greedy), unconstrained.
    """
    scaled = logits.float()
    if temperature > 0 and temperature != 1:
        scaled = scaled / temperature
    masked = scaled if allowed is None else scaled.masked_fill(~allowed, -math.inf)
    if temperature <= 0:
        choice = masked.argmax(dim=-1)
    else:
        probs = torch.softmax(masked, dim=-1)
        if top_p < 1:
            candidates, probs = nucleus(probs, top_p)
            choice = candidates.gather(1, draw(probs, generator)[:, None]).squeeze(1)
        else:
            choice = draw(probs, generator)
    logp = scaled.gather(1, choice[:, None]).squeeze(1) - torch.logsumexp(scaled, dim=-1)
    return choice, logp


def draw(probs: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
    """
    One index per row with probability proportional to `probs` (non-negative, any scale): the first
    index whose cumulative sum exceeds a uniform draw. A zero-probability index has an empty interval
    and is never drawn; the draw is kept below the total so that the last interval is closed.
    """
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=generator, device=probs.device, dtype=probs.dtype) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(1)


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """
    The top-p nucleus of each row as (token ids, their probabilities, zero outside the nucleus), both
    [B, k]: the most likely tokens, lower id first among equals, up to and including the one where the
    mass before it reaches top_p of the row's total. Found among the k most likely tokens, k growing
    until every row's nucleus, and the whole group of tokens tied with its last one, lies inside;
    sorting the vocabulary is what this avoids.
    """
    B, V = probs.shape
    total = probs.sum(dim=-1, keepdim=True)
    k = min(V, 64)
    while True:
        values, ids = probs.topk(k, dim=-1)
        # Lower id first among equal probabilities: order by id, then stably by probability.
        by_id = ids.argsort(dim=-1)
        ids, values = ids.gather(1, by_id), values.gather(1, by_id)
        order = values.argsort(dim=-1, descending=True, stable=True)
        ids, values = ids.gather(1, order), values.gather(1, order)
        inside = (values.cumsum(dim=-1) - values) < top_p * total
        inside[:, 0] = True
        size = inside.sum(dim=-1, keepdim=True)
        if k == V:
            break
        last = values.gather(1, size - 1)
        if bool(((size < k) & (last > values[:, -1:])).all()):
            break
        k = min(V, 4 * k)
    return ids, values * inside


# ---------------------------------------------------------------------- stop strings


def _byte_decoder() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def token_byte_table(tokenizer: Any, vocab: int) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """
    Each token id's UTF-8 bytes as it contributes them to decoded text, [V, longest] int16 padded with
    NO_BYTE, and their lengths; None when the tokenizer's decoding is not a plain concatenation of
    per-token bytes (only byte-level BPE is, e.g. GPT-2, Qwen2, SmolLM2). Every entry is checked
    against the tokenizer's own decoding of that token.
    """
    from tokenizers import decoders

    if not isinstance(tokenizer.decoder, decoders.ByteLevel):
        return None
    to_byte = _byte_decoder()
    rows: list[bytes] = []
    for i in range(vocab):
        piece = tokenizer.id_to_token(i)
        if piece is None:
            rows.append(b"")
            continue
        rows.append(bytes(to_byte[c] for c in piece) if all(c in to_byte for c in piece) else piece.encode("utf-8"))
    decoded = tokenizer.decode_batch([[i] for i in range(vocab)], skip_special_tokens=False)
    if any(raw.decode("utf-8", errors="replace") != text for raw, text in zip(rows, decoded)):
        return None
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    width = max(1, int(lengths.max()))
    padded = b"".join(r + bytes(width - len(r)) for r in rows)
    table = torch.frombuffer(bytearray(padded), dtype=torch.uint8).view(vocab, width).to(torch.int16)
    table[torch.arange(width)[None, :] >= lengths[:, None]] = NO_BYTE
    return table, lengths


class ByteStops:
    """
    Whether a row's response text contains a stop string, checked as each token arrives: a window of
    the response's last (longest stop - 1) bytes plus the new token's bytes is searched, so a match
    that ends in the new token is found without decoding the response. Matching UTF-8 bytes is
    matching the decoded text (a stop string is whole characters).
    """

    def __init__(self, table: tuple[torch.Tensor, torch.Tensor], stops: Sequence[str], rows: int, device: torch.device) -> None:
        self.table = table[0].to(device)
        self.lengths = table[1].to(device)
        self.patterns = [torch.tensor(list(s.encode("utf-8")), dtype=torch.int16, device=device) for s in stops]
        keep = max(p.numel() for p in self.patterns) - 1
        self.tail = torch.full((rows, keep), NO_BYTE, dtype=torch.int16, device=device)
        self.offsets = torch.arange(keep, device=device)

    def step(self, choice: torch.Tensor) -> torch.Tensor:
        window = torch.cat([self.tail, self.table[choice]], dim=1)
        hit = torch.zeros(choice.numel(), dtype=torch.bool, device=choice.device)
        for pattern in self.patterns:
            hit |= (window.unfold(1, pattern.numel(), 1) == pattern).all(dim=-1).any(dim=-1)
        self.tail = window.gather(1, self.lengths[choice][:, None] + self.offsets)
        return hit


class StreamStops:
    """The same check for tokenizers whose decoding is not per-token bytes: each row is decoded incrementally (tokenizers' DecodeStream)."""

    def __init__(self, tokenizer: Any, stops: Sequence[str], rows: int) -> None:
        from tokenizers.decoders import DecodeStream

        self.tokenizer = tokenizer
        self.stops = list(stops)
        self.keep = max(len(s) for s in stops) - 1
        self.streams = [DecodeStream(skip_special_tokens=False) for _ in range(rows)]
        self.tails = [""] * rows

    def step(self, choice: torch.Tensor) -> torch.Tensor:
        hit = []
        for b, tok in enumerate(choice.tolist()):
            text = self.tails[b] + (self.streams[b].step(self.tokenizer, tok) or "")
            hit.append(any(s in text for s in self.stops))
            self.tails[b] = text[len(text) - self.keep :] if self.keep > 0 else ""
        return torch.tensor(hit, dtype=torch.bool, device=choice.device)
