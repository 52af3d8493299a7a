#!/usr/bin/env python3
"""
The PyTorch worker on a GPU, checked against the same worker on CPU in fp32 (the reference that
src/policy/torch/engine.test.ts ties to the TypeScript engine), then timed against it.

Part 1, agreement (a model directory built by this project, e.g. the tip-reader warm-up model):
the same batch is scored, decoded greedily, trained for three AdamW steps and saved by workers in
several set-ups (CUDA fp32 with sdpa and eager attention, gradient checkpointing, bf16 weights,
fp32 weights under bf16 autocast, LoRA, flash attention); each prints its largest differences
from the CPU reference next to the tolerance it is held to.

Part 2, speed (a randomly initialised Qwen2 of about 300M parameters, built here with transformers):
trained and generated tokens per second on the GPU and on every CPU core, and the ratio.

    python3 bench/torch-gpu.py --model models/tipreader-explore-gain [--skip-speed] [--json out.json]

Needs a Python with torch, transformers, peft and safetensors (the project venv or the GPU image's);
exits 1 when any bounded check is outside its tolerance (a set-up the image cannot run, like flash
attention without its package, is reported and does not fail the run). Not part of the test suite: CI has no GPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "workers", "torch", "worker.py")

# Tolerances. Before training, one forward pass: fp32 GPU kernels sum in other orders than the CPU,
# a few ulps, so 1e-4 on log-probs (as engine.test.ts holds the CPU worker to the TypeScript engine).
LOGPROB_TOL_FP32 = 1e-4
# After three AdamW steps at lr 1e-3 the gap grows for a reason of its own: Adam's first step moves a
# weight by about lr * g / |g|, so a weight whose gradient is near zero moves by up to lr either way
# depending on rounding. Bounds: 10% of one step on weights, 1e-3 on log-probs. Measured on an H100:
# eager attention 1.2e-5 / 4.2e-5, sdpa (memory-efficient kernel, tiled softmax) 4.0e-5 / 3.5e-4.
LOGPROB_AFTER_TOL_FP32 = 1e-3
WEIGHT_TOL_FP32 = 1e-4
# bf16 keeps 8 bits of mantissa: one forward moves log-probs of a 512-token vocabulary by ~0.2 (H100),
# and three steps at lr 1e-3 on a tiny model by ~2, so only the first is bounded, loosely enough to
# catch misaligned tokens (several nats), and the rest is reported.
LOGPROB_TOL_BF16 = 0.5

OPTIMIZER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.01}
OBJECTIVE = {"clip_low": 0.2, "clip_high": 0.28, "dual_clip": 3, "kl_coef": 0.05, "low_prob_delta": None}
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"}


class WorkerFailed(Exception):
    pass


class Worker:
    """One worker process spoken to over its JSON-lines protocol (PROTOCOL.md)."""

    def __init__(self, python: str, log_dir: str, name: str) -> None:
        self.log_path = os.path.join(log_dir, f"{name}.stderr")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([python, WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.next_id = 0
        self.ready = self._read()
        if self.ready.get("event") != "ready":
            raise WorkerFailed(f"worker did not start: {self.ready}")

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.log.flush()
            with open(self.log_path) as f:
                tail = f.read()[-3000:]
            raise WorkerFailed(f"the worker exited (code {self.proc.poll()}); stderr tail:\n{tail}")
        return json.loads(line)

    def call(self, op: str, **fields: Any) -> Any:
        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        response = self._read()
        if not response.get("ok"):
            raise WorkerFailed(f"{op}: {response.get('error')}")
        return response["result"]

    def close(self) -> None:
        try:
            self.call("shutdown")
        except (WorkerFailed, BrokenPipeError):
            pass
        self.proc.wait(timeout=60)
        self.log.close()


def max_abs_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max((abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)), default=0.0)


def weights_diff(dir_a: str, dir_b: str) -> float:
    """Largest |Δw| over every tensor two saved directories share (model or PEFT adapter)."""
    from safetensors.torch import load_file

    def load(d: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in sorted(os.listdir(d)):
            if name.endswith(".safetensors"):
                out.update(load_file(os.path.join(d, name)))
        return out

    a, b = load(dir_a), load(dir_b)
    shared = sorted(set(a) & set(b))
    if not shared or len(shared) != len(a) or len(shared) != len(b):
        raise WorkerFailed(f"saved tensors differ in name: {sorted(set(a) ^ set(b))[:5]}")
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in shared)


def make_batch(vocab: int, end_token: int, rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Prompts and responses of mixed lengths (so padding and micro-batching are exercised)."""
    batch = []
    for _ in range(n):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(8, 160))]
        response = [rng.randrange(3, vocab) for _ in range(rng.randint(3, 40))] + [end_token]
        batch.append({"prompt": prompt, "response": response})
    return batch


def training_batch(batch: list[dict[str, Any]], reference_logprobs: list[list[float]], rng: random.Random) -> list[dict[str, Any]]:
    """Old log-probs a little off the current ones, so ratios leave 1 and both clips engage."""
    out = []
    for seq, lps in zip(batch, reference_logprobs):
        advantage = rng.gauss(0, 1)
        out.append({
            **seq,
            "advantages": [advantage] * len(lps),
            "old_logprobs": [lp + rng.gauss(0, 0.3) for lp in lps],
            "mask": [0.0 if rng.random() < 0.1 else 1.0 for _ in lps],
        })
    return out


def run_setup(python: str, work: str, name: str, init: dict[str, Any], batch, train_batch, prompts, end_token: int) -> dict[str, Any]:
    """Score, decode, train 3 steps, score again and save, in one worker."""
    w = Worker(python, work, name)
    try:
        info = w.call("init", **init)
        t0 = time.perf_counter()
        before = w.call("logprobs", batch=batch)["logprobs"]
        greedy = w.call("generate", prompts=prompts, max_tokens=24, temperature=0, seed=1, end_tokens=[end_token])["generations"]
        sampled = w.call("generate", prompts=prompts, max_tokens=24, temperature=1, seed=7, end_tokens=[end_token])["generations"]
        steps = [w.call("train_step", batch=train_batch, objective=OBJECTIVE) for _ in range(3)]
        after = w.call("logprobs", batch=batch)["logprobs"]
        saved = os.path.join(work, name)
        w.call("save", dir=saved)
        seconds = time.perf_counter() - t0
    finally:
        w.close()
    return {"info": info, "before": before, "after": after, "greedy": [g["tokens"] for g in greedy],
            "sampled": [g["tokens"] for g in sampled], "steps": steps, "dir": saved, "seconds": seconds}


def compare(ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    return {
        "logprobs_before": max_abs_diff(ref["before"], got["before"]),
        "logprobs_after": max_abs_diff(ref["after"], got["after"]),
        "loss": max(abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-8) for a, b in zip(ref["steps"], got["steps"])),
        "grad_norm": max(abs(a["grad_norm"] - b["grad_norm"]) / max(a["grad_norm"], 1e-8) for a, b in zip(ref["steps"], got["steps"])),
        "weights": weights_diff(ref["dir"], got["dir"]),
        "greedy_same": sum(a == b for a, b in zip(ref["greedy"], got["greedy"])) / len(ref["greedy"]),
        "sampled_same": sum(a == b for a, b in zip(ref["sampled"], got["sampled"])) / len(ref["sampled"]),
    }


def agreement(python: str, model_dir: str, work: str) -> tuple[list[dict[str, Any]], bool]:
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    vocab = int(config["vocab_size"])
    end_token = int(config.get("eos_token_id") or 2)
    rng = random.Random(0)
    batch = make_batch(vocab, end_token, rng, 24)
    prompts = [s["prompt"] for s in batch[:8]]
    base = {"model_dir": model_dir, "optimizer": OPTIMIZER, "max_grad_norm": 0.5, "micro_batch_tokens": 1024, "pad_token": 0, "seed": 0}

    def setup(name: str, ref: Optional[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        init = {**base, **extra}
        print(f"  {name}: {json.dumps(extra)}", flush=True)
        return run_setup(python, work, name, init, batch, train_batch, prompts, end_token)

    # The reference's own log-probs make the old log-probs of every set-up's (identical) training batch.
    w = Worker(python, work, "probe")
    w.call("init", **base)
    reference_lps = w.call("logprobs", batch=batch)["logprobs"]
    w.close()
    train_batch = training_batch(batch, reference_lps, rng)

    cpu = setup("cpu-fp32", None, device="cpu")
    cpu_lora = setup("cpu-fp32-lora", None, device="cpu", lora=LORA)
    fp32 = (LOGPROB_TOL_FP32, LOGPROB_AFTER_TOL_FP32, WEIGHT_TOL_FP32)
    half = (LOGPROB_TOL_BF16, None, None)
    # (name, reference, (tolerance on log-probs before, after training, on weights; None = report only), init fields)
    plans = [
        ("cuda-fp32-sdpa", cpu, fp32, {"device": "cuda"}),
        ("cuda-fp32-eager", cpu, fp32, {"device": "cuda", "attn_implementation": "eager"}),
        ("cuda-fp32-checkpointing", cpu, fp32, {"device": "cuda", "gradient_checkpointing": True}),
        ("cuda-fp32-lora", cpu_lora, fp32, {"device": "cuda", "lora": LORA}),
        ("cuda-autocast-bf16", cpu, half, {"device": "cuda", "autocast": "bfloat16"}),
        ("cuda-bf16-weights", cpu, half, {"device": "cuda", "dtype": "bfloat16"}),
        ("cuda-fp16-autocast", cpu, half, {"device": "cuda", "autocast": "float16"}),
        ("cuda-flash-attention-2", cpu, half, {"device": "cuda", "dtype": "bfloat16", "attn_implementation": "flash_attention_2"}),
    ]
    rows, ok = [], True
    for name, ref, (lp_tol, lp_after_tol, w_tol), extra in plans:
        try:
            got = setup(name, ref, **extra)
        except WorkerFailed as e:
            message = str(e).splitlines()[0][:300]
            print(f"    refused or failed: {message}", flush=True)
            rows.append({"setup": name, "error": message})
            if w_tol is not None:
                ok = False
            continue
        d = compare(ref, got)
        passed = (d["logprobs_before"] <= lp_tol and (lp_after_tol is None or d["logprobs_after"] <= lp_after_tol)
                  and (w_tol is None or d["weights"] <= w_tol))
        if not passed:
            ok = False
        rows.append({"setup": name, "device": got["info"]["device"], "dtype": got["info"]["dtype"], **d,
                     "logprob_tol": lp_tol, "logprob_after_tol": lp_after_tol, "weight_tol": w_tol, "passed": passed, "seconds": got["seconds"]})
    return rows, ok


def build_speed_model(out_dir: str) -> int:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                         tie_word_embeddings=True, rope_theta=10000.0)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out_dir)
    return sum(p.numel() for p in model.parameters())


def speed(python: str, work: str, cpu_threads: int) -> list[dict[str, Any]]:
    model_dir = os.path.join(work, "speed-model")
    params = build_speed_model(model_dir)
    print(f"  speed model: {params / 1e6:.0f}M parameters", flush=True)
    rng = random.Random(1)
    end_token = 2

    def train_batch(n: int, prompt_len: int, response_len: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            k = response_len
            out.append({"prompt": [rng.randrange(3, 32000) for _ in range(prompt_len)], "response": [rng.randrange(3, 32000) for _ in range(k)],
                        "advantages": [rng.gauss(0, 1)] * k, "old_logprobs": [-10.4] * k, "mask": [1.0] * k})
        return out

    base = {"model_dir": model_dir, "optimizer": OPTIMIZER, "max_grad_norm": 1.0, "pad_token": 0, "seed": 0}
    plans = [
        # name, init fields, train batch (n, prompt, response), generate (n, prompt, new tokens), repetitions
        ("cpu-fp32", {"device": "cpu", "micro_batch_tokens": 4096, "threads": cpu_threads}, (4, 384, 128), (4, 256, 16), 1),
        ("cuda-fp32", {"device": "cuda", "micro_batch_tokens": 16384}, (32, 384, 128), (32, 256, 128), 3),
        ("cuda-autocast-bf16", {"device": "cuda", "autocast": "bfloat16", "micro_batch_tokens": 16384}, (32, 384, 128), (32, 256, 128), 3),
        ("cuda-bf16-weights", {"device": "cuda", "dtype": "bfloat16", "micro_batch_tokens": 16384}, (32, 384, 128), (32, 256, 128), 3),
    ]
    rows = []
    for name, extra, (tn, tp, tr), (gn, gp, gk), reps in plans:
        print(f"  {name}", flush=True)
        w = Worker(python, work, f"speed-{name}")
        try:
            w.call("init", **base, **extra)
            batch = train_batch(tn, tp, tr)
            prompts = [[rng.randrange(3, 32000) for _ in range(gp)] for _ in range(gn)]
            # Warm-up (kernel selection, allocator), then timed repetitions.
            w.call("train_step", batch=batch[:2], objective=OBJECTIVE, lr=0)
            w.call("generate", prompts=prompts[:2], max_tokens=4, temperature=1, seed=0, end_tokens=[end_token])
            t0 = time.perf_counter()
            for _ in range(reps):
                w.call("train_step", batch=batch, objective=OBJECTIVE, lr=0)
            train_s = (time.perf_counter() - t0) / reps
            t0 = time.perf_counter()
            for _ in range(reps):
                gens = w.call("generate", prompts=prompts, max_tokens=gk, temperature=1, seed=0, end_tokens=[end_token])["generations"]
            gen_s = (time.perf_counter() - t0) / reps
        except WorkerFailed as e:
            print(f"    failed: {str(e)[:300]}", flush=True)
            rows.append({"setup": name, "error": str(e)[:300]})
            continue
        finally:
            w.close()
        trained = tn * (tp + tr)
        generated = sum(len(g["tokens"]) for g in gens)
        rows.append({"setup": name, "train_tokens_per_s": trained / train_s, "train_step_s": train_s, "train_tokens": trained,
                     "train_tflops": 6 * params * trained / train_s / 1e12,
                     "generate_tokens_per_s": generated / gen_s, "generate_s": gen_s, "generated_tokens": generated, "batch": gn})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model directory built by this project (config.json, model.safetensors, tokenizer.json)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs the worker")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--json", help="write every number to this file")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device: this benchmark compares the worker on a GPU with itself on CPU")
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; CPU threads {torch.get_num_threads()}", flush=True)
    results: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    with tempfile.TemporaryDirectory(prefix="empo2-torch-gpu-") as work:
        print("agreement with the CPU fp32 worker (same batch, 3 AdamW steps):", flush=True)
        rows, ok = agreement(args.python, os.path.abspath(args.model), work)
        results["agreement"] = rows
        print(f"\n| set-up | max |Δ log-prob| before (tol) | after training (tol) | max |Δw| after 3 steps (tol) | loss rel. Δ | greedy same | sampled same | within |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "error" in r:
                print(f"| {r['setup']} | {r['error'][:120]} | | | | | | |")
                continue
            tol = lambda t: "report" if t is None else f"{t:.0e}"
            print(f"| {r['setup']} | {r['logprobs_before']:.2e} ({tol(r['logprob_tol'])}) | {r['logprobs_after']:.2e} ({tol(r['logprob_after_tol'])}) "
                  f"| {r['weights']:.2e} ({tol(r['weight_tol'])}) | {r['loss']:.1e} | {r['greedy_same']:.0%} | {r['sampled_same']:.0%} | {'yes' if r['passed'] else 'NO'} |")
        if not args.skip_speed:
            print("\nspeed (about 300M parameters, random weights):", flush=True)
            rows = speed(args.python, work, torch.get_num_threads())
            results["speed"] = rows
            cpu = next((r for r in rows if r["setup"] == "cpu-fp32" and "error" not in r), None)
            print("\n| set-up | trained tokens/s | TFLOP/s (6·N·tokens) | generated tokens/s (batch) | train × CPU | generate × CPU |")
            print("|---|---|---|---|---|---|")
            for r in rows:
                if "error" in r:
                    print(f"| {r['setup']} | {r['error'][:120]} | | | | |")
                    continue
                tx = f"{r['train_tokens_per_s'] / cpu['train_tokens_per_s']:.0f}×" if cpu else "–"
                gx = f"{r['generate_tokens_per_s'] / cpu['generate_tokens_per_s']:.0f}×" if cpu else "–"
                print(f"| {r['setup']} | {r['train_tokens_per_s']:,.0f} | {r['train_tflops']:.1f} | {r['generate_tokens_per_s']:,.0f} ({r['batch']}) | {tx} | {gx} |")
    results["within_tolerance"] = ok
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"\nbounded checks within tolerance: {'yes' if ok else 'NO'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
