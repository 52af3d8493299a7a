#!/usr/bin/env python3
"""
The PyTorch policy worker: one JSON request per line on stdin, one JSON response per line on
stdout (see PROTOCOL.md). stdout carries nothing else: library output and logs go to stderr.

    python workers/torch/worker.py                      # one process (CPU or one GPU)
    torchrun --nproc_per_node=8 workers/torch/worker.py # FSDP over 8 GPUs; rank 0 talks, all ranks compute

A bad request gets an error response naming the field at fault and the worker keeps serving.
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
from typing import Any, Callable, Optional

PROTOCOL_VERSION = 2

# The protocol owns the real stdout; everything else that prints (transformers' progress bars,
# warnings, C extensions writing to fd 1) is sent to stderr so it can never corrupt a response.
_protocol_out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr


def exit_with_parent() -> None:
    """Linux: SIGTERM this worker when the process that started it dies. A trainer killed by SIGKILL or
    by the out-of-memory killer otherwise leaves its worker computing the current request (an update can
    take minutes) and holding its memory; the closed stdin is noticed only after that."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the request was in place
        sys.exit(0)


exit_with_parent()


def emit(message: dict[str, Any]) -> None:
    _protocol_out.write(json.dumps(message, allow_nan=False) + "\n")
    _protocol_out.flush()


try:
    import torch
    import torch.distributed as dist
    import transformers
except ImportError as e:  # the caller turns this into set-up advice
    emit({"event": "fatal", "kind": "missing_dependency", "message": f"cannot import {e.name or e}: {e}. Install the Python requirements (npm run setup:test, or pip install -r scripts/requirements-torch.txt)"})
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from branches import Branch  # noqa: E402
from engine import Dist, Engine, InitSpec, RequestError, Seq, StepResume  # noqa: E402
from objective import ObjectiveConfig  # noqa: E402
from step_resume import StepFileError, request_digest  # noqa: E402


# ---------------------------------------------------------------------- request validation


def field(obj: dict[str, Any], key: str, where: str, check: Callable[[Any], bool], expected: str, default: Any = ...) -> Any:
    if key not in obj or obj[key] is None:
        if default is not ...:
            return default
        raise RequestError(f"{where}.{key} is required ({expected})")
    value = obj[key]
    if not check(value):
        raise RequestError(f"{where}.{key} must be {expected} (got {json.dumps(value)[:80]})")
    return value


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_obj(v: Any) -> bool:
    return isinstance(v, dict)


def int_list(v: Any) -> bool:
    return isinstance(v, list) and all(is_int(x) for x in v)


def num_list(v: Any) -> bool:
    return isinstance(v, list) and all(is_num(x) for x in v)


def parse_init(req: dict[str, Any]) -> InitSpec:
    w = "init"
    optimizer = field(req, "optimizer", w, is_obj, "an object {lr, beta1, beta2, eps, weight_decay}")
    for key in ("lr", "beta1", "beta2", "eps", "weight_decay"):
        field(optimizer, key, f"{w}.optimizer", lambda v: is_num(v) and v >= 0, "a non-negative number")
    lora = field(req, "lora", w, is_obj, "an object {r, alpha, dropout, target_modules}", None)
    if lora is not None:
        field(lora, "r", f"{w}.lora", lambda v: is_int(v) and v > 0, "a positive integer")
        field(lora, "alpha", f"{w}.lora", lambda v: is_num(v) and v > 0, "a positive number")
        field(lora, "dropout", f"{w}.lora", lambda v: is_num(v) and 0 <= v < 1, "a number in [0, 1)", 0.0)
        field(lora, "target_modules", f"{w}.lora", lambda v: (isinstance(v, str) and v != "") or (isinstance(v, list) and len(v) > 0 and all(isinstance(x, str) for x in v)), "a non-empty list of module names (e.g. [\"q_proj\", \"v_proj\"]), 'all-linear', or a regular expression string")
        field(lora, "use_rslora", f"{w}.lora", lambda v: isinstance(v, bool), "true or false", False)
    threads = field(req, "threads", w, lambda v: is_int(v) and v > 0, "a positive integer", None)
    if threads is not None:
        torch.set_num_threads(threads)
    return InitSpec(
        model_dir=field(req, "model_dir", w, lambda v: isinstance(v, str) and v != "", "a directory path"),
        device=field(req, "device", w, lambda v: isinstance(v, str), "'cpu', 'cuda' or 'auto'", "cpu"),
        dtype=field(req, "dtype", w, lambda v: isinstance(v, str), "'float32', 'bfloat16' or 'float16'", "float32"),
        autocast=field(req, "autocast", w, lambda v: isinstance(v, str), "null, 'bfloat16' or 'float16'", None),
        base_bf16=field(req, "base_bf16", w, lambda v: isinstance(v, bool), "true or false", False),
        gradient_checkpointing=field(req, "gradient_checkpointing", w, lambda v: v is None or isinstance(v, bool), "true, false or null (auto)", None),
        attn_implementation=field(req, "attn_implementation", w, lambda v: v in ("sdpa", "eager", "flash_attention_2"), "'sdpa', 'eager' or 'flash_attention_2'", "sdpa"),
        lora=lora,
        adapter_dir=field(req, "adapter_dir", w, lambda v: isinstance(v, str) and os.path.isdir(v), "an existing PEFT adapter directory", None),
        optimizer=optimizer,
        optimizer_state=field(req, "optimizer_state", w, lambda v: isinstance(v, str), "a path to optimizer.pt", None),
        max_grad_norm=field(req, "max_grad_norm", w, lambda v: is_num(v) and v >= 0, "a non-negative number (0 disables clipping)", 0.0),
        micro_batch_tokens=field(req, "micro_batch_tokens", w, lambda v: is_int(v) and v > 0, "a positive integer"),
        pad_token=field(req, "pad_token", w, lambda v: is_int(v) and v >= 0, "a token id"),
        seed=field(req, "seed", w, is_int, "an integer", 0),
        kv_cache_mb=float(field(req, "kv_cache_mb", w, lambda v: is_num(v) and v >= 0, "a non-negative number of MiB (0 keeps no caches)", 4096)),
        activation_mb=field(req, "activation_mb", w, lambda v: is_num(v) and v > 0, "null or a positive number of MiB", None),
        random_weights=field(req, "random_weights", w, lambda v: isinstance(v, bool), "true or false", False),
    )


def parse_batch(engine: Engine, req: dict[str, Any], op: str, training: bool, kl: bool) -> list[Seq]:
    batch = field(req, "batch", op, lambda v: isinstance(v, list), "a list of sequences")
    seqs: list[Seq] = []
    for i, item in enumerate(batch):
        w = f"{op}.batch[{i}]"
        if not is_obj(item):
            raise RequestError(f"{w} must be an object")
        prompt = field(item, "prompt", w, int_list, "a list of token ids")
        response = field(item, "response", w, int_list, "a list of token ids")
        if len(prompt) == 0:
            raise RequestError(f"{w}.prompt is empty (scoring needs at least one prompt token)")
        engine.check_ids(prompt, f"{w}.prompt")
        engine.check_ids(response, f"{w}.response")
        policy = field(item, "policy_tokens", w, lambda v: isinstance(v, list) and all(x in (0, 1) and not isinstance(x, bool) for x in v), "null or a list of 0/1 flags, one per response token", None)
        if policy is not None and len(policy) != len(response):
            raise RequestError(f"{w}.policy_tokens has {len(policy)} flags but the response has {len(response)} tokens")
        seq = Seq(prompt, response, policy_tokens=policy, branches=parse_branches(engine, item, w, len(prompt) + len(response)))
        if training:
            per_token = f"the response has {len(response)} tokens" if policy is None else f"the sequence has {seq.scored} policy tokens"
            for key in ("advantages", "old_logprobs", "mask") + (("ref_logprobs",) if kl and "ref_logprobs" in item else ()):
                values = field(item, key, w, num_list, "a list of finite numbers")
                if len(values) != seq.scored:
                    raise RequestError(f"{w}.{key} has {len(values)} values but {per_token}")
                setattr(seq, key, [float(x) for x in values])
            seq.low_prob_mask = field(item, "low_prob_mask", w, lambda v: isinstance(v, bool), "true or false", True)
        seqs.append(seq)
    return seqs


def parse_branches(engine: Engine, item: dict[str, Any], w: str, trunk_len: int) -> Optional[list[Branch]]:
    """A sequence's `branches` (trunk plus branches, ./branches.py), or None."""
    spec = field(item, "branches", w, lambda v: isinstance(v, list), "null or a list of {prefix, ids, policy_tokens}", None)
    if not spec:
        return None
    if engine.branch_attention is None:
        raise RequestError(
            f"{w}.branches: this worker does not take trunk-plus-branches sequences (they need attn_implementation 'sdpa', one process "
            "(not torchrun / FSDP) and a model without sliding-window layers); send each step as its own sequence"
        )
    out: list[Branch] = []
    for k, b in enumerate(spec):
        wb = f"{w}.branches[{k}]"
        if not is_obj(b):
            raise RequestError(f"{wb} must be an object")
        prefix = field(b, "prefix", wb, lambda v: is_int(v) and 0 <= v <= trunk_len, f"a number of trunk tokens (0..{trunk_len})")
        ids = field(b, "ids", wb, lambda v: int_list(v) and len(v) > 0, "a non-empty list of token ids")
        engine.check_ids(ids, f"{wb}.ids")
        policy = field(b, "policy_tokens", wb, lambda v: isinstance(v, list) and all(x in (0, 1) and not isinstance(x, bool) for x in v), "a list of 0/1 flags, one per id")
        if len(policy) != len(ids):
            raise RequestError(f"{wb}.policy_tokens has {len(policy)} flags but the branch has {len(ids)} ids")
        if policy[0] != 0:
            raise RequestError(f"{wb}.policy_tokens[0] must be 0: a branch's first token (its tips) is context")
        out.append(Branch(prefix, ids, policy))
    return out


def parse_objective(req: dict[str, Any]) -> ObjectiveConfig:
    o = field(req, "objective", "train_step", is_obj, "an object {clip_low, clip_high, dual_clip, kl_coef, low_prob_delta}")
    w = "train_step.objective"
    return ObjectiveConfig(
        clip_low=float(field(o, "clip_low", w, lambda v: is_num(v) and 0 <= v < 1, "a number in [0, 1)")),
        clip_high=float(field(o, "clip_high", w, lambda v: is_num(v) and v >= 0, "a non-negative number")),
        dual_clip=field(o, "dual_clip", w, lambda v: is_num(v) and v > 1, "null or a number > 1", None),
        kl_coef=float(field(o, "kl_coef", w, lambda v: is_num(v) and v >= 0, "a non-negative number", 0.0)),
        low_prob_delta=field(o, "low_prob_delta", w, lambda v: is_num(v) and 0 < v < 1, "null or a probability in (0, 1)", None),
    )


def parse_resume(req: dict[str, Any]) -> Optional[StepResume]:
    spec = field(req, "resume", "train_step", lambda v: v is None or is_obj(v), "null or {file, every_seconds}", None)
    if spec is None:
        return None
    w = "train_step.resume"
    file = field(spec, "file", w, lambda v: isinstance(v, str) and v != "", "a file path")
    if not os.path.isdir(os.path.dirname(os.path.abspath(file))):
        raise RequestError(f"{w}.file {file}: its folder does not exist")
    every = field(spec, "every_seconds", w, lambda v: is_num(v) and v >= 0, "a non-negative number (0: after every micro-batch)")
    return StepResume(file, float(every), request_digest(req))


def temperature_of(req: dict[str, Any], op: str) -> float:
    return float(field(req, "temperature", op, lambda v: is_num(v) and v > 0, "a positive number", 1.0))


# ---------------------------------------------------------------------- dispatch


class Worker:
    def __init__(self) -> None:
        self.dist = Dist()
        self.engine: Optional[Engine] = None
        self.request_id: Any = None

    def report_progress(self, done: int, total: int, resumed: bool = False) -> None:
        """A progress event for the request being served (rank 0 speaks for all ranks)."""
        if self.dist.rank == 0:
            emit({"event": "progress", "id": self.request_id, "done": done, "total": total, **({"resumed": True} if resumed else {})})

    def need_engine(self, op: str) -> Engine:
        if self.engine is None:
            raise RequestError(f"{op}: the worker has no model yet; send an 'init' request first")
        return self.engine

    def handle(self, req: dict[str, Any]) -> Any:
        op = req.get("op")
        if op == "init":
            spec = parse_init(req)
            if self.engine is not None:
                # Free the old model before loading the next (a 7B model twice may not fit).
                self.engine = None
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            self.engine = Engine(spec, self.dist)
            self.engine.progress = self.report_progress
            return self.engine.info()
        if op == "info":
            return self.need_engine(op).info()
        if op == "logprobs":
            e = self.need_engine(op)
            return {"logprobs": e.logprobs(parse_batch(e, req, op, False, False), temperature_of(req, op))}
        if op == "generate":
            e = self.need_engine(op)
            w = op
            prompts = field(req, "prompts", w, lambda v: isinstance(v, list) and all(int_list(p) for p in v), "a list of token-id lists")
            for i, p in enumerate(prompts):
                if not p:
                    raise RequestError(f"generate.prompts[{i}] is empty")
                e.check_ids(p, f"generate.prompts[{i}]")
            end_tokens = field(req, "end_tokens", w, lambda v: int_list(v) and len(v) > 0, "a non-empty list of token ids")
            e.check_ids(end_tokens, "generate.end_tokens")
            allowed = field(req, "allowed", w, lambda v: isinstance(v, list) and len(v) == len(prompts), "null or one entry per prompt (null or a list of token-id lists)", None)
            if allowed is not None:
                for i, seqs in enumerate(allowed):
                    if seqs is not None and not (isinstance(seqs, list) and all(int_list(s) for s in seqs)):
                        raise RequestError(f"generate.allowed[{i}] must be null or a list of token-id lists")
                    for j, ids in enumerate(seqs or []):
                        e.check_ids(ids, f"generate.allowed[{i}][{j}]")
            cache_keys = field(req, "cache_keys", w, lambda v: isinstance(v, list) and len(v) == len(prompts) and all(k is None or (isinstance(k, str) and k) for k in v), "null or one entry per prompt (null or a non-empty string)", None)
            if cache_keys is not None:
                seen: dict[str, int] = {}
                for i, k in enumerate(cache_keys):
                    if k is not None and k in seen:
                        raise RequestError(f"generate.cache_keys[{i}] repeats {json.dumps(k)} (also cache_keys[{seen[k]}]); a key names one sequence")
                    if k is not None:
                        seen[k] = i
            if not prompts:
                return {"generations": [], "prefill_tokens": 0, "reused_tokens": 0}
            gens, stats = e.generate(
                prompts,
                max_tokens=field(req, "max_tokens", w, lambda v: is_int(v) and v > 0, "a positive integer"),
                temperature=float(field(req, "temperature", w, lambda v: is_num(v) and v >= 0, "a non-negative number (0: greedy)")),
                top_p=float(field(req, "top_p", w, lambda v: is_num(v) and 0 < v <= 1, "a number in (0, 1]", 1.0)),
                seed=field(req, "seed", w, is_int, "an integer"),
                end_tokens=end_tokens,
                stop_strings=field(req, "stop", w, lambda v: isinstance(v, list) and all(isinstance(s, str) and s for s in v), "a list of non-empty strings", []),
                allowed=allowed,
                cache_keys=cache_keys,
            )
            return {"generations": gens, **stats}
        if op == "release_cache":
            e = self.need_engine(op)
            keys = field(req, "keys", op, lambda v: isinstance(v, list) and all(isinstance(k, str) for k in v), "a list of cache keys")
            return {"released": e.release_cache(keys), **e.prefix_cache.stats()}
        if op == "train_step":
            e = self.need_engine(op)
            objective = parse_objective(req)
            seqs = parse_batch(e, req, op, True, objective.kl_coef > 0)
            lr = field(req, "lr", op, lambda v: is_num(v) and v >= 0, "null or a non-negative number", None)
            return e.train_step(seqs, objective, temperature_of(req, op), None if lr is None else float(lr), parse_resume(req))
        if op == "save":
            e = self.need_engine(op)
            out_dir = field(req, "dir", op, lambda v: isinstance(v, str) and v != "", "a directory path")
            merged = field(req, "merged", op, lambda v: isinstance(v, bool), "true or false", False)
            with_optimizer = field(req, "optimizer", op, lambda v: isinstance(v, bool), "true or false", False)
            return e.save(out_dir, merged, with_optimizer)
        if op == "shutdown":
            return {}
        raise RequestError(f"unknown op {json.dumps(op)} (expected init, info, logprobs, generate, release_cache, train_step, save or shutdown)")


def error_kind(e: BaseException) -> str:
    if isinstance(e, (RequestError, StepFileError)):
        return "bad_request"
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return "out_of_memory"
    return "internal"


def main() -> None:
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    worker = Worker()
    rank0 = worker.dist.rank == 0
    # For benchmarks (bench/update-variants.py): every init and train_step request is appended, as
    # received, to this file, so the same update can be replayed later under other settings.
    record = os.environ.get("EMPO2_RECORD_TRAIN_STEPS") if rank0 else None
    if rank0:
        import peft

        emit({
            "event": "ready",
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "world_size": worker.dist.world,
            "cuda": torch.cuda.is_available(),
            "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
        })
    while True:
        line: Optional[str] = sys.stdin.readline() if rank0 else None
        if worker.dist.enabled:
            box = [line]
            dist.broadcast_object_list(box, src=0)
            line = box[0]
        if not line:  # caller closed stdin: leave quietly
            break
        if not line.strip():
            continue
        req_id: Any = None
        op: Any = None
        try:
            try:
                req = json.loads(line)
            except json.JSONDecodeError as e:
                raise RequestError(f"the request is not valid JSON: {e}") from e
            if not isinstance(req, dict):
                raise RequestError("the request must be a JSON object {id, op, ...}")
            req_id, op = req.get("id"), req.get("op")
            worker.request_id = req_id
            if record and op in ("init", "train_step"):
                with open(record, "a", encoding="utf-8") as f:
                    f.write(line if line.endswith("\n") else line + "\n")
            result = worker.handle(req)
            response = {"id": req_id, "ok": True, "result": result}
        except Exception as e:  # any failure is answered; the worker keeps serving
            kind = error_kind(e)
            if kind != "bad_request":
                traceback.print_exc(file=sys.stderr)
            if kind == "out_of_memory" and torch.cuda.is_available():
                torch.cuda.empty_cache()
            message = str(e) if kind == "bad_request" else f"{op}: {type(e).__name__}: {e}"
            response = {"id": req_id, "ok": False, "error": {"kind": kind, "message": message}}
        if rank0:
            try:
                emit(response)
            except ValueError as e:  # NaN or inf in a result: say so instead of writing invalid JSON
                emit({"id": req_id, "ok": False, "error": {"kind": "internal", "message": f"{op}: the result holds a non-finite number ({e}); the model has probably diverged"}})
        if op == "shutdown":
            break
    if worker.dist.enabled:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
