#!/usr/bin/env python3
"""
Times the same PPO update under several worker settings, in one process, alternately (A B A B ...), so
that a loaded machine slows every variant alike and the ratios stay meaningful.

The update is a real one: the worker appends every `init` and `train_step` request it receives to the
file named by EMPO2_RECORD_TRAIN_STEPS (bench/real-model.ts --update-variants records one iteration).
One engine is loaded per autocast setting; before each timed run its trainable weights, optimiser
state and random seed are put back, so every variant performs exactly the same update from exactly the
same weights, and the losses and gradient norms of the variants can be compared (fp32 variants agree to
rounding).

    .venv/bin/python bench/update-variants.py --requests FILE [--variants "old;new;new,autocast=bfloat16"]
        [--reps 2] [--threads 2] [--json OUT] [--profile VARIANT]

A variant is a comma-separated list of settings, optionally named (`name=...` first is not needed; the
text itself is the name):
  old                   the settings before the update-speed work: explicit padding mask, the attention
                        term in the activation estimate (which turned checkpointing on for long episodes)
  new                   the current defaults
  mask=padded|causal    explicit padding mask or the causal kernel alone
  estimate=old|new      the activation estimate with or without the attention-probabilities term
  checkpointing=auto|on|off
  dropout=X             LoRA dropout (the recorded run's is kept otherwise)
  autocast=bfloat16|none
  base=bf16|fp32        the frozen base's linear products in bf16, the rest fp32 (the worker's base_bf16)
  base=round-weights    diagnosis: the frozen base's weights rounded to bf16, every product in fp32
  base=round-inputs     diagnosis: the frozen base's inputs rounded to bf16, weights and products fp32
  head=fp32|bf16        under autocast, the output layer in fp32 (the engine's choice on CPU) or not
  micro_batch_tokens=N
Printed: per variant, seconds per rep, the ratio to the first variant per rep (median, min, max), the
peak resident memory above the loaded model, and loss / grad norm / scored log-probs against the first
variant (max and mean absolute difference of the response log-probs, and against the recorded sampling
log-probs: that difference is what the first PPO ratio exp(new - old) sees).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import statistics
import sys
import threading
import time
import types
from typing import Any, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "workers", "torch"))
_stdout = os.dup(1)
import worker as W  # noqa: E402  (the worker's own request parsing; it sends fd 1 to stderr on import)
os.dup2(_stdout, 1)
sys.stdout = sys.__stdout__
from engine import Dist, Engine, fp32_output_layer  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def trim() -> None:
    """Hands freed heap back to the system (glibc), so the next peak counts only what that run holds."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakRss:
    """Highest resident set size seen while the block runs (sampled every 20 ms)."""

    def __enter__(self) -> "PeakRss":
        self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


def parse_variant(text: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        if part == "old":
            settings.update(mask="padded", estimate="old")
        elif part == "new":
            settings.update(mask="causal", estimate="new")
        elif "=" in part:
            k, v = part.split("=", 1)
            if k not in ("mask", "estimate", "checkpointing", "dropout", "autocast", "base", "head", "micro_batch_tokens"):
                raise SystemExit(f"--variants: unknown setting {k!r} in {text!r}")
            settings[k] = v
        else:
            raise SystemExit(f"--variants: {part!r} is neither old, new nor key=value (in {text!r})")
    return settings


def set_dropout(engine: Engine, p: float) -> None:
    """LoRA dropout p on every adapter (PEFT uses Identity for p = 0: no copy of the input)."""
    for module in engine.model.modules():
        drops = getattr(module, "lora_dropout", None)
        if isinstance(drops, torch.nn.ModuleDict):
            for name in list(drops.keys()):
                drops[name] = torch.nn.Dropout(p) if p > 0 else torch.nn.Identity()


def apply(engine: Engine, settings: dict[str, str], base: dict[str, Any]) -> None:
    engine.mask_padding = settings.get("mask", "causal") == "padded"
    engine.attention_probs_stored = settings.get("estimate", "new") == "old"
    ck = settings.get("checkpointing", "auto")
    engine.spec.gradient_checkpointing = {"auto": None, "on": True, "off": False}[ck]
    if ck != "auto":
        engine._set_checkpointing(engine.model, ck == "on")
    # Checkpointing forced off: the variant accepts whatever memory that takes (its peak is reported).
    engine.spec.activation_mb = 1e9 if ck == "off" else base["activation_mb"]
    dropout = float(settings.get("dropout", base["dropout"]))
    set_dropout(engine, dropout)
    # The old estimate had no dropout term.
    engine.active_dropout = dropout > 0 and not engine.attention_probs_stored
    # Under autocast the engine keeps the output layer in fp32; head=bf16 undoes that (for comparison).
    head = engine._causal_lm().get_output_embeddings()
    if engine.spec.autocast and settings.get("head", "fp32") == "fp32":
        fp32_output_layer(engine._causal_lm())
    elif "forward" in vars(head):
        del head.forward
    engine.spec.micro_batch_tokens = int(settings.get("micro_batch_tokens", base["micro_batch_tokens"]))


def _fp32_rounded_input_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x.to(torch.bfloat16).float(), self.weight, self.bias)


def round_base(engine: Engine, how: str) -> None:
    """Diagnosis of base_bf16's error: only its weight rounding (round-weights) or only its input rounding (round-inputs), products fp32."""
    head = engine._causal_lm().get_output_embeddings()
    for module in engine._causal_lm().modules():
        if isinstance(module, torch.nn.Linear) and module is not head and not module.weight.requires_grad:
            if how == "round-weights":
                module.weight.data = module.weight.data.to(torch.bfloat16).float()
            else:
                module.forward = types.MethodType(_fp32_rounded_input_forward, module)


def scored_logprobs(engine: Engine, batches: list) -> torch.Tensor:
    """The scored tokens' log-probs as the update computes them (grouped as it groups them), in request order, float64."""
    engine.model.eval()
    with torch.no_grad():
        parts: list[torch.Tensor] = []
        for seqs, _, temp, _ in batches:
            by_index: dict[int, torch.Tensor] = {}
            for group in engine.micro_batches(seqs, range(len(seqs))):
                flat = engine.response_logprobs([seqs[i] for i in group], temp)
                at = 0
                for i in group:
                    by_index[i] = flat[at : at + seqs[i].scored]
                    at += seqs[i].scored
            parts.extend(by_index[i] for i in range(len(seqs)))
        return torch.cat(parts).double()


def all_token_logprobs(engine: Engine, batches: list) -> torch.Tensor:
    """log p(token_t | tokens_<t) for every token after the first of every sequence (prompt and response), one sequence per forward, float64."""
    engine.model.eval()
    parts: list[torch.Tensor] = []
    with torch.no_grad():
        for seqs, _, temp, _ in batches:
            for s in seqs:
                ids = torch.tensor([s.prompt + s.response], dtype=torch.long)
                with engine._autocast():
                    logits = engine.model(input_ids=ids, logits_to_keep=0, use_cache=False).logits[0, :-1].float()
                if temp != 1:
                    logits = logits / temp
                parts.append((logits.gather(1, ids[0, 1:, None]).squeeze(1) - torch.logsumexp(logits, dim=1)).double())
                del logits
    return torch.cat(parts)


def mean_ci(x: torch.Tensor, block: int = 32) -> tuple[float, float, float]:
    """Mean with a 95% interval by batch means: neighbouring tokens' errors correlate, so the interval is
    taken over the means of consecutive blocks of `block` tokens, not over tokens."""
    n = x.numel() // block
    means = x[: n * block].reshape(n, block).mean(1) if n >= 2 else x
    half = 1.96 * float(means.std()) / math.sqrt(means.numel())
    m = float(x.mean())
    return m, m - half, m + half


def diff_stats(d: torch.Tensor) -> dict[str, Any]:
    """|d| max / mean / 99th percentile, the mean of d and of exp(d) - 1 (the PPO ratio's deviation) with 95% intervals."""
    a = d.abs()
    return {
        "n": d.numel(), "abs_max": float(a.max()), "abs_mean": float(a.mean()), "abs_p99": float(torch.quantile(a, 0.99)),
        "mean": mean_ci(d), "ratio_minus_1": mean_ci(torch.expm1(d)),
    }


def fmt_stats(st: dict[str, Any]) -> str:
    m, r = st["mean"], st["ratio_minus_1"]
    return (f"n {st['n']} | |d| max {st['abs_max']:.2e} mean {st['abs_mean']:.2e} p99 {st['abs_p99']:.2e} | "
            f"mean d {m[0]:+.2e} [{m[1]:+.2e}, {m[2]:+.2e}] | mean exp(d)-1 {r[0]:+.2e} [{r[1]:+.2e}, {r[2]:+.2e}]")


def parity(path: str, lines: list, variants: list[str], prepare: Any, logps_fn: Any) -> dict[str, Any]:
    """
    Every recorded train_step (not only --steps') scored under each variant against the first: all tokens
    of every sequence and the scored ones. Then the recorded updates are made, in order, by the first
    variant; its trained weights are copied into each variant's engine, and the PPO ratio pi_new/pi_old
    of the scored tokens is computed under each variant's arithmetic (old from the start weights, new from
    the trained ones, both under that variant) and compared with the first variant's ratio.
    """
    ref = variants[0]
    e0 = prepare(ref)
    steps = [r for r in lines if r.get("op") == "train_step"]
    batches = [(W.parse_batch(e0, r, "train_step", True, W.parse_objective(r).kl_coef > 0), W.parse_objective(r), W.temperature_of(r, "train_step"), r.get("lr")) for r in steps]
    n_tok = sum(len(s.prompt) + len(s.response) - 1 for b in batches for s in b[0])
    print(f"\nparity: {len(batches)} recorded train_step(s), {sum(len(b[0]) for b in batches)} sequences, {n_tok} tokens scored in all, {sum(s.scored for b in batches for s in b[0])} of them policy tokens", flush=True)
    before_all: dict[str, torch.Tensor] = {}
    before_scored: dict[str, torch.Tensor] = {}
    for v in variants:
        e = prepare(v)
        t0 = time.perf_counter()
        before_all[v] = all_token_logprobs(e, batches)
        before_scored[v] = logps_fn(e, batches)
        print(f"  {v}: scored in {time.perf_counter() - t0:.1f} s", flush=True)
    e0 = prepare(ref)
    t0 = time.perf_counter()
    for seqs, cfg, temp, lr in batches:
        out = e0.train_step(seqs, cfg, temp, lr)
        print(f"  update under {ref!r}: loss {out['loss']:.4g}, grad norm {out['grad_norm']:.4g}, mean ratio {out['mean_ratio']:.6f}", flush=True)
    trained = [p.detach().clone() for p in e0.params]
    print(f"  {len(batches)} update(s) in {time.perf_counter() - t0:.1f} s", flush=True)
    after_scored: dict[str, torch.Tensor] = {}
    for v in variants:
        e = prepare(v) if v != ref else e0
        with torch.no_grad():
            for p, w in zip(e.params, trained):
                p.copy_(w)
        after_scored[v] = logps_fn(e, batches)
    ratio_ref = torch.exp(after_scored[ref] - before_scored[ref])
    cfg = batches[0][1]
    out: dict[str, Any] = {"tokens_all": n_tok, "variants": {}}
    print(f"\nparity against {ref!r} (d = variant - {ref!r} log-prob; intervals 95%, batch means over 32-token blocks)")
    for v in variants:
        ratio = torch.exp(after_scored[v] - before_scored[v])
        outside = lambda r: float(((r < 1 - cfg.clip_low) | (r > 1 + cfg.clip_high)).double().mean())
        row = {
            "all_tokens": diff_stats(before_all[v] - before_all[ref]),
            "scored_tokens": diff_stats(before_scored[v] - before_scored[ref]),
            "ratio_after_update": {
                "abs_diff_max": float((ratio - ratio_ref).abs().max()), "abs_diff_mean": float((ratio - ratio_ref).abs().mean()),
                "diff_mean": mean_ci(ratio - ratio_ref), "ratio_mean": float(ratio.mean()), "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
                "outside_clip": outside(ratio),
            },
        }
        out["variants"][v] = row
        rr = row["ratio_after_update"]
        print(f"{v}\n  all tokens:    {fmt_stats(row['all_tokens'])}\n  scored tokens: {fmt_stats(row['scored_tokens'])}")
        print(f"  ratio pi_new/pi_old after the update(s): mean {rr['ratio_mean']:.6f} [min {rr['ratio_min']:.4f}, max {rr['ratio_max']:.4f}], outside the clip range {rr['outside_clip']:.4f}; "
              f"against {ref!r}: |diff| max {rr['abs_diff_max']:.2e} mean {rr['abs_diff_mean']:.2e}, mean diff {rr['diff_mean'][0]:+.2e} [{rr['diff_mean'][1]:+.2e}, {rr['diff_mean'][2]:+.2e}]", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", required=True, help="file of recorded init/train_step requests (EMPO2_RECORD_TRAIN_STEPS)")
    ap.add_argument("--variants", default="old;new", help="';'-separated variants; the first is the reference")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="replay only the first N train_step requests (0: all)")
    ap.add_argument("--merge", action="store_true", help="replay the recorded requests' sequences as one train_step (several episodes per micro-batch, as in larger batches)")
    ap.add_argument("--model", default=None, help="model directory when the file holds no init request")
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", default=None, help="a variant: profile one update under it and print the top operators")
    ap.add_argument("--generate", action="store_true", help="also time generation under each variant: a rollout-like prefill and steps on the recorded sequences")
    ap.add_argument("--no-update", action="store_true", help="with --generate: time generation only")
    ap.add_argument("--parity", action="store_true", help="log-prob parity of every variant against the first on every recorded sequence (all tokens and the scored ones), and the PPO ratio after the recorded updates (made in the first variant) computed under each")
    ap.add_argument("--parity-only", action="store_true", help="--parity alone: no timing")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    lines = [json.loads(line) for line in open(args.requests) if line.strip()]
    inits = [r for r in lines if r.get("op") == "init"]
    steps = [r for r in lines if r.get("op") == "train_step"]
    if args.steps:
        steps = steps[: args.steps]
    if not steps:
        raise SystemExit(f"{args.requests}: no train_step request")
    if args.merge:
        steps = [{**steps[0], "batch": [item for r in steps for item in r["batch"]]}]
    if inits:
        init = dict(inits[-1])
    else:  # the settings of bench/real-model.ts
        if not args.model:
            raise SystemExit("--model is needed: the file has no init request")
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
        ends = [t for t in (tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")) if t is not None]
        init = {
            "model_dir": args.model, "device": "cpu", "micro_batch_tokens": 16384, "pad_token": ends[-1], "seed": 0,
            "lora": {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
            "optimizer": {"lr": 1e-5, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}, "max_grad_norm": 1.0,
        }
    if args.model:
        init["model_dir"] = args.model
    init["threads"] = args.threads
    spec = W.parse_init(init)
    torch.set_num_threads(args.threads)
    base = {"dropout": float((spec.lora or {}).get("dropout", 0.0)), "micro_batch_tokens": spec.micro_batch_tokens}
    # One engine per autocast setting (autocast on CPU stores the frozen weights in bf16 at init), each
    # with the first one's activation budget so that all make the same micro-batching choices.
    EngineKey = tuple[Optional[str], str]
    engines: dict[EngineKey, Engine] = {}
    snapshots: dict[EngineKey, tuple[list[torch.Tensor], dict[str, Any]]] = {}

    def engine_for(autocast: Optional[str], base: str = "fp32") -> Engine:
        key = (autocast, base)
        if key not in engines:
            if base not in ("fp32", "bf16", "round-weights", "round-inputs"):
                raise SystemExit(f"--variants: base must be fp32, bf16, round-weights or round-inputs (got {base!r})")
            e = Engine(dataclasses.replace(spec, autocast=autocast, base_bf16=base == "bf16"), Dist())
            if base.startswith("round-"):
                round_base(e, base)
            spec.activation_mb = e.spec.activation_mb
            engines[key] = e
            snapshots[key] = ([p.detach().clone() for p in e.params], copy.deepcopy(e.optimizer.state_dict()))
        return engines[key]

    engine = engine_for(None)
    base["activation_mb"] = engine.spec.activation_mb
    batches = [(W.parse_batch(engine, r, "train_step", True, W.parse_objective(r).kl_coef > 0), W.parse_objective(r), W.temperature_of(r, "train_step"), r.get("lr")) for r in steps]
    widths = sorted(len(s.prompt) + len(s.response) for b in batches for s in b[0])
    scored = sum(s.scored for b in batches for s in b[0])
    print(f"{len(steps)} train_step request(s), {sum(len(b[0]) for b in batches)} sequences, {sum(widths)} tokens (widths {widths[0]}..{widths[-1]}), {scored} scored; {args.threads} threads, torch {torch.__version__}", flush=True)

    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    settings = {v: parse_variant(v) for v in variants}

    def prepare(v: str) -> Engine:
        """The variant's engine with the weights, optimiser state and seed of the start, settings applied."""
        autocast = settings[v].get("autocast", "none")
        key = (None if autocast == "none" else autocast, settings[v].get("base", "fp32"))
        e = engine_for(*key)
        weights, optim_state = snapshots[key]
        with torch.no_grad():
            for p, w in zip(e.params, weights):
                p.copy_(w)
        e.optimizer.load_state_dict(copy.deepcopy(optim_state))
        torch.manual_seed(0)
        apply(e, settings[v], base)
        return e

    def update(e: Engine) -> list[dict[str, float]]:
        return [e.train_step(seqs, cfg, temp, lr) for seqs, cfg, temp, lr in batches]

    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        settings[args.profile] = parse_variant(args.profile)
        e = prepare(args.profile)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            update(e)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=30))
        return

    # Log-probs of the scored tokens under each variant's precision and path (before any update: the
    # recorded sampling log-probs came from these same weights on the first iteration).
    logps: dict[str, torch.Tensor] = {}
    old = torch.tensor([x for seqs, *_ in batches for s in seqs for x in s.old_logprobs], dtype=torch.float64)
    # The sampling log-probs are comparable only for on-policy sequences (an off-policy one is scored
    # without the tips it was sampled with); low_prob_mask is false exactly for those (grpo.ts).
    on_policy = torch.tensor([not s.low_prob_mask for seqs, *_ in batches for s in seqs for _ in range(s.scored)])
    if not on_policy.any():
        on_policy[:] = True
    for v in variants:
        logps[v] = scored_logprobs(prepare(v), batches)

    gen_times: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    gen_mismatch: dict[str, tuple[float, float]] = {}
    if args.generate:
        # Rollout-like: every recorded sequence is an episode; the first call prefills its first half
        # (the history so far), then 3 steps each add 60 tokens (action + observation) to the kept
        # cache and sample 12 tokens, batched over the episodes. The end token is one never sampled
        # (the last id), so every row decodes all 12 tokens under every variant.
        fulls = [s.prompt + s.response for seqs, *_ in batches for s in seqs]
        cut = min(len(f) for f in fulls) // 2
        end = [engine.vocab_size - 1]
        for rep in range(args.reps):
            for v in variants:
                engine = prepare(v)
                keys = [f"{v}/{rep}/{i}" for i in range(len(fulls))]
                t0 = time.perf_counter()
                engine.generate([f[:cut] for f in fulls], 12, 1.0, 1.0, 7, end, [], None, keys)
                t1 = time.perf_counter()
                sampled: list[tuple[list[int], dict[str, Any]]] = []
                for k in range(1, 4):
                    prompts = [f[: cut + 60 * k] for f in fulls]
                    rows, _ = engine.generate(prompts, 12, 1.0, 1.0, 7 + k, end, [], None, keys)
                    sampled += list(zip(prompts, rows))
                t2 = time.perf_counter()
                engine.release_cache(keys)
                gen_times[v].append((t1 - t0, t2 - t1))
                # Sampler against learner: the sampled tokens scored again by a training-style forward
                # under the same settings; exp(difference) is the first PPO ratio of an unchanged policy.
                with torch.no_grad():
                    learner = torch.cat([engine.response_logprobs([W.Seq(p, r["tokens"])], 1.0) for p, r in sampled]).double()
                sampler = torch.tensor([x for _, r in sampled for x in r["logprobs"]], dtype=torch.float64)
                diff = (learner - sampler).abs()
                gen_mismatch[v] = (float(diff.max()), float(diff.mean()))
                print(f"  generate rep {rep + 1} {v}: prefill {len(fulls)} x {cut} tokens {t1 - t0:.1f} s, 3 steps (+60 tokens, 12 sampled) {t2 - t1:.1f} s; sampler vs learner log-probs max {gen_mismatch[v][0]:.2e} mean {gen_mismatch[v][1]:.2e}", flush=True)

    if args.parity_only:
        report = {"requests": args.requests, "threads": args.threads, "parity": parity(args.requests, lines, variants, prepare, logps_fn=lambda e, bs: scored_logprobs(e, bs))}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
                f.write("\n")
        return
    if args.parity:
        report_parity = parity(args.requests, lines, variants, prepare, logps_fn=lambda e, bs: scored_logprobs(e, bs))
    else:
        report_parity = None

    times: dict[str, list[float]] = {v: [] for v in variants}
    score_times: dict[str, list[float]] = {v: [] for v in variants}
    peaks: dict[str, float] = {v: 0.0 for v in variants}
    results: dict[str, list[dict[str, float]]] = {}
    for rep in range(0 if args.no_update else args.reps):
        for v in variants:
            engine = prepare(v)
            t0 = time.perf_counter()
            scored_logprobs(engine, batches)
            score_times[v].append(time.perf_counter() - t0)
            trim()
            before = rss_mb()
            with PeakRss() as peak:
                t0 = time.perf_counter()
                out = update(engine)
                seconds = time.perf_counter() - t0
            times[v].append(seconds)
            peaks[v] = max(peaks[v], peak.peak - before)
            results[v] = out
            print(f"  rep {rep + 1} {v}: scoring {score_times[v][-1]:.1f} s; update {seconds:.1f} s, peak +{peak.peak - before:.0f} MiB, checkpointing {engine.checkpointing}, loss {out[0]['loss']:.6g}, grad norm {out[0]['grad_norm']:.6g}", flush=True)

    ref = variants[0]
    report: dict[str, Any] = {"requests": args.requests, "threads": args.threads, "reps": args.reps, "tokens": sum(widths), "scored": scored, "variants": {}, "parity": report_parity}
    if not args.no_update:
        print(f"\nvariant | scoring forward s (reps) | ratio to {ref!r}: median [min, max]")
        for v in variants:
            sr = [a / b for a, b in zip(score_times[v], score_times[ref])]
            print(f"{v} | {' '.join(f'{t:.1f}' for t in score_times[v])} | {statistics.median(sr):.3f} [{min(sr):.3f}, {max(sr):.3f}]")
    print(f"\nvariant | s per update (reps) | ratio to {ref!r}: median [min, max] | peak MiB | loss rel. diff | grad-norm rel. diff | log-prob vs ref max/mean | vs sampling max/mean")
    for v in variants:
        ratios = [t / r for t, r in zip(times[v], times[ref])] or [math.nan]
        rel = lambda key: max((abs(a[key] - b[key]) / max(abs(b[key]), 1e-30) for a, b in zip(results.get(v, []), results.get(ref, []))), default=math.nan)
        d_ref = (logps[v] - logps[ref]).abs()
        d_old = (logps[v] - old).abs()[on_policy]
        row = {
            "settings": settings[v], "seconds": times[v], "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "peak_mb": peaks[v], "loss_rel_diff": rel("loss"), "grad_norm_rel_diff": rel("grad_norm"),
            "logprob_vs_ref_max": float(d_ref.max()), "logprob_vs_ref_mean": float(d_ref.mean()),
            "logprob_vs_sampling_max": float(d_old.max()), "logprob_vs_sampling_mean": float(d_old.mean()),
            "results": results.get(v, []), "scoring_seconds": score_times[v],
        }
        report["variants"][v] = row
        print(f"{v} | {' '.join(f'{t:.1f}' for t in times[v])} | {row['ratio_median']:.3f} [{row['ratio_min']:.3f}, {row['ratio_max']:.3f}] | {peaks[v]:.0f} | {row['loss_rel_diff']:.2e} | {row['grad_norm_rel_diff']:.2e} | {row['logprob_vs_ref_max']:.2e}/{row['logprob_vs_ref_mean']:.2e} | {row['logprob_vs_sampling_max']:.2e}/{row['logprob_vs_sampling_mean']:.2e}")
    if args.generate:
        print(f"\nvariant | generate prefill s (reps) | ratio to {ref!r} | 3 rollout steps s (reps) | ratio to {ref!r}: median [min, max] | sampler vs learner log-prob max/mean")
        for v in variants:
            pre = [a / b for (a, _), (b, _) in zip(gen_times[v], gen_times[ref])]
            step = [a / b for (_, a), (_, b) in zip(gen_times[v], gen_times[ref])]
            report["variants"][v]["generate"] = {"prefill_s": [a for a, _ in gen_times[v]], "steps_s": [b for _, b in gen_times[v]], "prefill_ratio": statistics.median(pre), "steps_ratio": statistics.median(step), "steps_ratio_min": min(step), "steps_ratio_max": max(step), "sampler_vs_learner_max": gen_mismatch[v][0], "sampler_vs_learner_mean": gen_mismatch[v][1]}
            print(f"{v} | {' '.join(f'{a:.1f}' for a, _ in gen_times[v])} | {statistics.median(pre):.3f} | {' '.join(f'{b:.1f}' for _, b in gen_times[v])} | {statistics.median(step):.3f} [{min(step):.3f}, {max(step):.3f}] | {gen_mismatch[v][0]:.2e}/{gen_mismatch[v][1]:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
