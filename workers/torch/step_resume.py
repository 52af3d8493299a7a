"""
A training step saved between micro-batches, so that a killed step goes on where it was.

One optimiser step of an EMPO² update with tips on-policy can run for hours on a CPU (every step's
full prompt trained on its own); the trainer saves the iteration after each step, so a process that
dies inside one loses all of it. `train_step` with a `resume` file writes, every `every_seconds`, the
gradients summed so far, the statistics, how many micro-batches are done and torch's random state
(dropout's masks) to that file; a later `train_step` with the same file, the same request and the same
starting weights loads it and runs only the micro-batches left. The sums are restored exactly, so the
step ends bit for bit as it would have straight.

The file names what it was saved for: a digest of the request (batch, objective, temperature, lr), the
micro-batch grouping and the trainable weights. A file saved for anything else is refused with the
reason rather than silently mixed in.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

FORMAT = "empo2-train-step"
VERSION = 1


class StepFileError(Exception):
    """The resume file cannot be used for this step (the worker answers it as a bad request)."""


def request_digest(req: dict[str, Any]) -> str:
    """What the step computes from: everything in the request but its id and the resume settings."""
    body = {k: v for k, v in req.items() if k not in ("id", "resume")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def weights_digest(params: Sequence[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for p in params:
        t = p.detach()
        t = t.to_local() if hasattr(t, "to_local") else t
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())  # bytes of any dtype, bf16 too
    return h.hexdigest()


@dataclass
class SavedStep:
    rounds_done: int
    stats: torch.Tensor
    grads: list[Optional[torch.Tensor]]
    rng: dict[str, Any]


class StepFile:
    """The file of one step: `load` before its micro-batches, `maybe_save` after each."""

    def __init__(self, path: str, every_seconds: float, request: str, groups: list[list[int]], params: Sequence[torch.Tensor]) -> None:
        self.path = path
        self.every_seconds = every_seconds
        self.identity = {"request": request, "groups": hashlib.sha256(json.dumps(groups).encode()).hexdigest(), "weights": weights_digest(params)}
        self.params = list(params)
        self.last_save = time.monotonic()

    def load(self, rounds: int) -> Optional[SavedStep]:
        if not os.path.isfile(self.path):
            return None
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch.load raises unpickling, EOF and runtime errors alike
            raise StepFileError(f"train_step.resume.file {self.path} is not a step saved by this worker ({type(e).__name__}: {e}); remove it to run the step from its start") from e
        if not isinstance(saved, dict) or saved.get("format") != FORMAT or saved.get("version") != VERSION:
            raise StepFileError(f"train_step.resume.file {self.path} is not a step saved by this worker version (format {saved.get('format') if isinstance(saved, dict) else type(saved).__name__}); remove it to run the step from its start")
        for what, meaning in (("request", "another batch, objective or learning rate"), ("groups", "another micro-batch grouping (micro_batch_tokens or activation_mb changed?)"), ("weights", "other starting weights")):
            if saved.get(what) != self.identity[what]:
                raise StepFileError(f"train_step.resume.file {self.path} was saved for {meaning}; remove it to run the step from its start")
        grads = saved["grads"]
        if saved.get("rounds") != rounds or len(grads) != len(self.params):
            raise StepFileError(f"train_step.resume.file {self.path} does not fit this step ({saved.get('rounds')} micro-batches and {len(grads)} parameters saved, {rounds} and {len(self.params)} here)")
        for i, (g, p) in enumerate(zip(grads, self.params)):
            if g is not None and g.shape != p.shape:
                raise StepFileError(f"train_step.resume.file {self.path}: gradient {i} has shape {tuple(g.shape)}, the parameter {tuple(p.shape)}")
        return SavedStep(int(saved["rounds_done"]), saved["stats"], grads, saved["rng"])

    def maybe_save(self, rounds_done: int, rounds: int, stats: torch.Tensor, rng: dict[str, Any]) -> bool:
        now = time.monotonic()
        if now - self.last_save < self.every_seconds:
            return False
        state = {
            "format": FORMAT,
            "version": VERSION,
            **self.identity,
            "rounds": rounds,
            "rounds_done": rounds_done,
            "stats": stats.detach().cpu().clone(),
            "grads": [None if p.grad is None else p.grad.detach().cpu().clone() for p in self.params],
            "rng": rng,
        }
        tmp = f"{self.path}.tmp-{os.getpid()}"
        torch.save(state, tmp)
        os.replace(tmp, self.path)  # a kill mid-write leaves the previous save whole
        self.last_save = time.monotonic()
        return True
