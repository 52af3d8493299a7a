#!/usr/bin/env python3
"""
The PyTorch worker's generation against Hugging Face `generate` on the same model object, batch,
prompts and number of new tokens, timed in one run, repetitions interleaved (a loaded machine
slows both alike); and, with --rollout, a lockstep rollout-like workload (episodes whose every
step's prompt extends the last one by the response and a new observation, responses constrained
to "valid actions") timed with and without prefix reuse (cache_keys), checking both give the same
tokens.

    .venv/bin/python bench/worker-generate.py [--model DIR] [--batch 8] [--prompt-len 256] [--new-tokens 32]
        [--reps 3] [--threads 2] [--rollout] [--episodes 8] [--steps 8] [--json FILE]

Tokens/s counts generated tokens over the whole call (prefill included) for both. End tokens: a
token id neither side produces in practice (the last id), so both run every step; the counts are
checked equal. Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "workers", "torch"))

import torch  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

from engine import Dist, Engine, InitSpec  # noqa: E402


def default_model() -> str:
    local = os.path.join(HERE, "..", "models", "smollm2-135m-instruct")
    return local if os.path.isfile(os.path.join(local, "config.json")) else "/tmp/smol-hf"


def make_engine(model_dir: str, micro_batch_tokens: int) -> Engine:
    spec = InitSpec(
        model_dir=model_dir, device="cpu", dtype="float32", autocast=None, gradient_checkpointing=False, attn_implementation="sdpa",
        lora=None, adapter_dir=None, optimizer={"lr": 1e-5, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.0},
        optimizer_state=None, max_grad_norm=0.0, micro_batch_tokens=micro_batch_tokens, pad_token=0, seed=0,
    )
    return Engine(spec, Dist())


def random_prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """Lengths spread over ±25% so that padding is part of the work, as in a real batch."""
    g = torch.Generator().manual_seed(seed)
    lengths = [max(1, int(length * (0.75 + 0.5 * i / max(1, batch - 1)))) for i in range(batch)]
    return [torch.randint(100, vocab, (n,), generator=g).tolist() for n in lengths]


def hf_generate(engine: Engine, prompts: list[list[int]], new_tokens: int, temperature: float, end: int, seed: int) -> int:
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((B, L), 0, dtype=torch.long)
    attention = torch.zeros((B, L), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = torch.tensor(p)
        attention[b, L - len(p):] = 1
    config = GenerationConfig(
        max_new_tokens=new_tokens, do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
        top_p=None, top_k=None, eos_token_id=end, pad_token_id=0, use_cache=True,
    )
    torch.manual_seed(seed)
    with torch.no_grad():
        out = engine.model.generate(input_ids=ids, attention_mask=attention, generation_config=config)
    generated = out[:, L:]
    total = 0
    for row in generated.tolist():
        total += row.index(end) + 1 if end in row else len(row)
    return total


def worker_generate(engine: Engine, prompts, new_tokens, temperature, end, seed, keys=None, allowed=None):
    gens, stats = engine.generate(prompts, new_tokens, temperature, 1.0, seed, [end], [], allowed, keys)
    return gens, stats


def compare_generate(engine: Engine, args, vocab: int) -> dict:
    end = vocab - 1
    prompts = random_prompts(args.batch, args.prompt_len, vocab - 1, 1)
    results = {}
    for mode, temperature in (("greedy", 0.0), ("sample", 1.0)):
        worker_s, hf_s, worker_cpu, hf_cpu, counts = [], [], [], [], set()
        worker_generate(engine, prompts[:2], 2, temperature, end, 0)  # warm-up both paths
        hf_generate(engine, prompts[:2], 2, temperature, end, 0)
        for rep in range(args.reps):
            c0, t0 = time.process_time(), time.perf_counter()
            gens, _ = worker_generate(engine, prompts, args.new_tokens, temperature, end, rep)
            c1, t1 = time.process_time(), time.perf_counter()
            n_hf = hf_generate(engine, prompts, args.new_tokens, temperature, end, rep)
            c2, t2 = time.process_time(), time.perf_counter()
            counts.add((sum(len(g["tokens"]) for g in gens), n_hf))
            worker_s.append(t1 - t0)
            hf_s.append(t2 - t1)
            worker_cpu.append(c1 - c0)
            hf_cpu.append(c2 - c1)
        n_worker, n_hf = counts.pop()
        w, h = n_worker / statistics.median(worker_s), n_hf / statistics.median(hf_s)
        # Each repetition runs both back to back, so the median of per-pair ratios is the robust one.
        pair_ratios = [(n_worker / a) / (n_hf / b) for a, b in zip(worker_s, hf_s)]
        ratio = statistics.median(pair_ratios)
        # CPU seconds of this process: on a machine shared with other jobs they measure the work
        # done, where wall time also measures the neighbours (exact with one thread; with several
        # it includes threads waiting on each other).
        wc, hc = n_worker / statistics.median(worker_cpu), n_hf / statistics.median(hf_cpu)
        results[mode] = {
            "worker_tokens_per_s": round(w, 2), "hf_generate_tokens_per_s": round(h, 2), "ratio": round(ratio, 3),
            "pair_ratios": [round(r, 3) for r in pair_ratios], "tokens": [n_worker, n_hf],
            "worker_s": [round(x, 3) for x in worker_s], "hf_s": [round(x, 3) for x in hf_s],
            "worker_tokens_per_cpu_s": round(wc, 2), "hf_generate_tokens_per_cpu_s": round(hc, 2), "cpu_ratio": round(wc / hc, 3),
        }
        print(f"{mode:7s} wall: worker {w:8.1f} tok/s, HF generate {h:8.1f} tok/s, ratio {ratio:.3f} (median of pairs {', '.join(f'{r:.2f}' for r in pair_ratios)}); "
              f"CPU time: {wc:.1f} vs {hc:.1f} tok/s, ratio {wc / hc:.3f}; tokens {n_worker}/{n_hf}", flush=True)
    return results


def rollout(engine: Engine, args, vocab: int, reuse: bool) -> dict:
    """Lockstep episodes: prompt_t = prompt_{t-1} + response + observation; responses among 'valid actions'."""
    g = torch.Generator().manual_seed(7)
    E = args.episodes
    prompts = [torch.randint(100, vocab - 1, (args.first_prompt,), generator=g).tolist() for _ in range(E)]
    end = vocab - 1
    keys = [f"episode-{e}" for e in range(E)] if reuse else None
    engine.prefix_cache.clear()
    responses: list[list[list[int]]] = [[] for _ in range(E)]
    prefilled = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for step in range(args.steps):
        actions = [[torch.randint(100, vocab - 1, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist() + [end] for _ in range(20)] for _ in range(E)]
        gens, stats = engine.generate(prompts, 10, 1.0, 1.0, 1000 + step, [end], [], actions, keys)
        prefilled += stats["prefill_tokens"]
        for e, gen in enumerate(gens):
            responses[e].append(gen["tokens"])
            observation = torch.randint(100, vocab - 1, (int(torch.randint(50, 151, (1,), generator=g)),), generator=g).tolist()
            prompts[e] = prompts[e] + gen["tokens"] + observation
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    if keys:
        engine.release_cache(keys)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2), "prefill_tokens": prefilled, "final_prompt_tokens": max(len(p) for p in prompts), "responses": responses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--micro-batch-tokens", type=int, default=1 << 20, help="prefill chunk budget (default: one chunk, as HF generate)")
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--rollout", action="store_true")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--first-prompt", type=int, default=400)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = make_engine(args.model, args.micro_batch_tokens)
    vocab = engine.vocab_size
    report: dict = {"model": os.path.abspath(args.model), "threads": torch.get_num_threads(), "torch": torch.__version__}
    print(f"model {args.model}, {torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    if not args.skip_generate:
        print(f"generate: batch {args.batch}, prompts {args.prompt_len} tokens ±25%, {args.new_tokens} new tokens, {args.reps} interleaved repetitions", flush=True)
        report["generate"] = {"batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, **compare_generate(engine, args, vocab)}
    if args.rollout:
        print(f"rollout: {args.episodes} episodes x {args.steps} steps, first prompt {args.first_prompt} tokens, +50..150 tokens per step, constrained responses of 2-9 tokens", flush=True)
        with_reuse = rollout(engine, args, vocab, True)
        without = rollout(engine, args, vocab, False)
        same = with_reuse.pop("responses") == without.pop("responses")
        speedup = without["seconds"] / with_reuse["seconds"]
        cpu_speedup = without["cpu_seconds"] / with_reuse["cpu_seconds"]
        for name, r in (("with reuse", with_reuse), ("without reuse", without)):
            print(f"  {name:13s} {r['seconds']:8.2f} s wall, {r['cpu_seconds']:8.2f} s CPU, prefilled {r['prefill_tokens']:7d} tokens", flush=True)
        print(f"  speed-up {speedup:.2f}x wall, {cpu_speedup:.2f}x CPU; same tokens: {same}; longest prompt {with_reuse['final_prompt_tokens']} tokens", flush=True)
        report["rollout"] = {"episodes": args.episodes, "steps": args.steps, "with_reuse": with_reuse, "without_reuse": without, "speedup": round(speedup, 2), "cpu_speedup": round(cpu_speedup, 2), "same_tokens": same}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
