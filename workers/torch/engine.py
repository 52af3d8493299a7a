"""
The policy on PyTorch + transformers: scoring, sampling and one optimiser step on the EMPO²
objective. Every computation mirrors src/policy/tfjs/engine.ts so the two engines are
interchangeable: right-padded scoring with per-token log-softmax at a temperature, micro-batches
grouped by length under a token budget, a token mean over the whole batch, global-norm gradient
clipping, and AdamW with weight decay on matrices only.

With torchrun (WORLD_SIZE > 1) the model is sharded with FSDP2 and every batch is split across
ranks; all collectives are issued the same number of times on every rank, so ranks that run out
of work run a zero-weight pass instead of skipping (skipping would deadlock the all-gathers).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
from transformers import DynamicCache

from branches import Branch, branch_batch, install as install_branch_attention
from decoding import ByteStops, StreamStops, TokenTries, choose, token_byte_table
from objective import ObjectiveConfig, objective_terms
from prefix_cache import BatchedCache, CachedPrefix, PrefixCache, common_prefix, extract, prefill_groups
from step_resume import StepFile

# Files besides the weights that make a saved directory a complete policy (tokenizer, chat template).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class RequestError(Exception):
    """The request is wrong (bad field, id out of range); the worker stays usable."""


@dataclass
class Seq:
    prompt: list[int]
    response: list[int]
    advantages: Optional[list[float]] = None
    old_logprobs: Optional[list[float]] = None
    mask: Optional[list[float]] = None
    ref_logprobs: Optional[list[float]] = None
    # Whether the token-level low-probability (delta) mask applies to this sequence.
    low_prob_mask: bool = True
    # A packed episode: 1 for the response tokens that are the policy's (scored), 0 for context.
    policy_tokens: Optional[list[int]] = None
    # Trunk plus branches (./branches.py): this sequence is the trunk; scored tokens are the trunk's, then each branch's.
    branches: Optional[list[Branch]] = None

    @property
    def trunk_scored(self) -> int:
        return len(self.response) if self.policy_tokens is None else sum(self.policy_tokens)

    @property
    def scored(self) -> int:
        """How many tokens are scored: one log-prob and one value of every per-token array each."""
        return self.trunk_scored + sum(b.scored for b in self.branches or [])


@dataclass
class StepResume:
    """train_step's `resume`: the file a long step is saved to between micro-batches, and how often."""

    file: str
    every_seconds: float
    request: str  # step_resume.request_digest of the request


@dataclass
class InitSpec:
    model_dir: str
    device: str
    dtype: str
    autocast: Optional[str]
    gradient_checkpointing: Optional[bool]  # None: on only for steps that need it (auto)
    attn_implementation: str
    lora: Optional[dict[str, Any]]
    adapter_dir: Optional[str]
    optimizer: dict[str, float]
    optimizer_state: Optional[str]
    max_grad_norm: float
    micro_batch_tokens: int
    pad_token: int
    seed: int
    kv_cache_mb: float = 4096.0
    # Bound on a training micro-batch's activations (None: the padded-token budget alone). On CPU the
    # worker takes a share of the memory available at start-up, so a long packed episode cannot OOM.
    activation_mb: Optional[float] = None
    # Benchmarks: weights drawn at random from config.json alone (on the device, no weight files read),
    # e.g. a Qwen2.5-7B-shaped model for bench/gpu-check.sh.
    random_weights: bool = False
    # The frozen base's linear products in bf16, everything else fp32 (resolve_base_bf16). Off by
    # default: it moves log-probs by up to 0.15 (results/smollm2-speed/bf16-parity-2026-12-02.md).
    base_bf16: bool = False


def available_memory_mb() -> float:
    """MemAvailable from /proc/meminfo (Linux), else 8 GiB."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 8192.0


class Dist:
    """Rank, world size and the few collectives the engine needs (no-ops in a single process)."""

    def __init__(self) -> None:
        self.enabled = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.enabled else 0
        self.world = dist.get_world_size() if self.enabled else 1

    def shard(self, n: int) -> list[int]:
        return list(range(self.rank, n, self.world))

    def max_int(self, value: int, device: torch.device) -> int:
        if not self.enabled:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def gather(self, obj: Any) -> list[Any]:
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out


def full_attention_only(config: Any) -> bool:
    """True when no layer uses a sliding window (a kept cache then serves any longer prompt)."""
    c = config.get_text_config(decoder=True)
    types = getattr(c, "layer_types", None)
    if types:
        return all(t == "full_attention" for t in types)
    return getattr(c, "sliding_window", None) is None or getattr(c, "use_sliding_window", True) is False


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slow."""
    cpu = getattr(torch, "cpu", None)
    checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def check_cpu_autocast(autocast: str, dtype: str) -> None:
    """
    bf16 autocast on CPU: the matrix products run in bf16 (about twice the fp32 rate on an AVX512-BF16
    CPU, results/smollm2-speed/update-speed-*.md), the weights and optimiser stay fp32. Refused where
    it cannot pay: float16 (CPU kernels for it are slow or missing) and CPUs without native bf16.
    """
    if autocast == "float16":
        raise RequestError("init: autocast 'float16' is for GPUs; on CPU use autocast 'bfloat16' (on a CPU with AVX512-BF16 or AMX) or none")
    if dtype != "float32":
        raise RequestError(f"init: autocast on CPU needs dtype 'float32' (got {dtype!r}): the weights stay fp32, the products run in bf16")
    if not cpu_has_bf16():
        raise RequestError("init: autocast 'bfloat16' on CPU needs a CPU with AVX512-BF16 or AMX (this one has neither; bf16 would be emulated, slower than float32); use no autocast")


def _fp32_linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    with torch.autocast(device_type=x.device.type, enabled=False):
        return torch.nn.functional.linear(x.float(), self.weight, self.bias)


def fp32_output_layer(model: torch.nn.Module) -> None:
    """
    The output layer outside autocast: bf16 logits of magnitude ~20 are only good to about ±0.06,
    as large as the differences the PPO ratio is clipped at; in fp32 they cost one small product per
    scored token (training) or per sampled token (generation).
    """
    head = model.get_output_embeddings()
    if isinstance(head, torch.nn.Linear):
        head.forward = types.MethodType(_fp32_linear_forward, head)


def _bf16_base_linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x.to(torch.bfloat16), self.weight, self.bias).to(x.dtype)


def bf16_base_products(model: torch.nn.Module) -> int:
    """
    base_bf16: the frozen linear layers (LoRA's base layers) store their weights in bf16 and multiply
    in bf16, their input rounded to bf16 and their output returned in fp32, so that LoRA's A and B,
    the norms, attention, the residual stream, the output layer and the log-softmax stay fp32. The
    rounding then enters only where the frozen weights are applied, against autocast's every product
    (results/smollm2-speed/bf16-parity-2026-12-02.md). Returns how many layers.
    """
    n = bf16_frozen_linears(model)
    head = model.get_output_embeddings()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head and module.weight.dtype == torch.bfloat16 and not module.weight.requires_grad:
            module.forward = types.MethodType(_bf16_base_linear_forward, module)
    return n


def resolve_base_bf16(spec: "InitSpec", device: torch.device, lora: bool, world: int) -> bool:
    """
    Whether the frozen base multiplies in bf16 (bf16_base_products). Asked for, it needs what makes it
    pay and keeps everything else fp32: a CPU with native bf16, fp32 weights, no autocast (which already
    runs every product, the base's too, in bf16), LoRA (a frozen base) and one process; refused
    otherwise, saying which.
    """
    if not spec.base_bf16:
        return False
    if device.type != "cpu":
        raise RequestError("init: base_bf16 is for CPUs; on a GPU use dtype 'bfloat16' or autocast")
    if spec.autocast:
        raise RequestError("init: base_bf16 and autocast exclude each other (autocast already runs every product, the base's too, in bf16); set one")
    if spec.dtype != "float32":
        raise RequestError(f"init: base_bf16 needs dtype 'float32' (got {spec.dtype!r}): only the frozen base is stored in bf16, LoRA and the rest stay fp32")
    if not lora:
        raise RequestError("init: base_bf16 needs LoRA (lora or adapter_dir): without adapters no weight is frozen")
    if world > 1:
        raise RequestError("init: base_bf16 runs in one process (not under torchrun / FSDP)")
    if not cpu_has_bf16():
        raise RequestError("init: base_bf16 needs a CPU with AVX512-BF16 or AMX (this one has neither; bf16 would be emulated, slower than float32); set base_bf16 false")
    return True


def bf16_frozen_linears(model: torch.nn.Module) -> int:
    """
    Frozen linear weights (LoRA's base layers) stored in bf16. Under autocast every product casts its
    fp32 weight to bf16 anew, and autocast caches that cast only for weights that train: for a
    frozen weight it is redone on every call, which in generation (one call per sampled token) costs
    more than the bf16 product saves. Stored in bf16 once, the products are the same (autocast rounds
    the weight identically). The output layer keeps fp32 (fp32_output_layer). Returns how many.
    """
    head = model.get_output_embeddings()
    n = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head and not module.weight.requires_grad and module.weight.dtype == torch.float32:
            module.weight.data = module.weight.data.to(torch.bfloat16)
            if module.bias is not None and not module.bias.requires_grad:
                module.bias.data = module.bias.data.to(torch.bfloat16)
            n += 1
    return n


RNG_STATE_FILE = "rng_state.pt"


def rng_states() -> dict[str, Any]:
    """torch's global generators (CPU and every CUDA device): what dropout draws from."""
    states: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["cpu"])
    cuda = states.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def pick_device(requested: str, d: Dist) -> torch.device:
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise RequestError("init: device 'cuda' requested but torch sees no CUDA device (use device 'cpu' or 'auto')")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    if requested != "cpu":
        raise RequestError(f"init: device must be 'cpu', 'cuda' or 'auto' (got {requested!r})")
    # Several CPU ranks run FSDP2 over gloo: slower than one process, but the same sharded code path
    # as on GPUs, which is how it is tested without one (src/policy/torch/fsdp.test.ts).
    return torch.device("cpu")


@dataclass
class _Sampling:
    """How _generate_local samples: as the generate request says."""

    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    end_tokens: list[int]
    stop_strings: list[str]
    allowed: list


@dataclass
class _RowLayout:
    """The rows of one generate call as the model sees them (prefix_cache.py): per row, the tokens reused from a kept
    cache and the new ones, and the padded ids, positions and attention mask, rows longest-new-part first."""

    prompts: list[list[int]]
    reuse: list[int]
    held: list[Optional[torch.Tensor]]
    new: list[list[int]]
    B: int
    C: int
    N: int
    order: list[int]
    to_request: torch.Tensor
    to_model: torch.Tensor
    ids: torch.Tensor
    positions: torch.Tensor
    attention: torch.Tensor

    @staticmethod
    def of(prompts, keys, prefix_cache, pad_token: int, max_tokens: int, dev) -> "_RowLayout":
        B = len(prompts)
        # Reuse: per row, the kept cache's longest common prefix with the prompt, less the last
        # prompt token, whose logits start the response.
        reuse = [0] * B
        held: list[Optional[torch.Tensor]] = [None] * B
        for b, key in enumerate(keys or []):
            entry = prefix_cache.get(key) if key is not None else None
            if entry is not None:
                reuse[b] = min(common_prefix(entry.tokens, torch.tensor(prompts[b], dtype=torch.long)), len(prompts[b]) - 1)
                held[b] = entry.kv
        new = [p[r:] for p, r in zip(prompts, reuse)]
        C = max(reuse)
        N = max(len(n) for n in new)
        # The model sees the rows longest-new-part first (model row r is request row order[r]), so
        # that rows of similar length prefill together; sampling stays in request order.
        order = sorted(range(B), key=lambda b: (-len(new[b]), b))
        to_request = torch.tensor(sorted(range(B), key=order.__getitem__), dtype=torch.long, device=dev)
        to_model = torch.tensor(order, dtype=torch.long, device=dev)
        # Row r: [pad | cached reuse | pad | new tokens][decoded tokens...] (see prefix_cache.py).
        ids = torch.full((B, N), pad_token, dtype=torch.long)
        positions = torch.zeros((B, N), dtype=torch.long)
        attention = torch.zeros((B, C + N + max_tokens), dtype=torch.long)
        for row, b in enumerate(order):
            r, n = reuse[b], new[b]
            ids[row, N - len(n) :] = torch.tensor(n, dtype=torch.long)
            positions[row, N - len(n) :] = torch.arange(r, r + len(n))
            attention[row, C - r : C] = 1
            attention[row, C + N - len(n) :] = 1
        return _RowLayout(prompts, reuse, held, new, B, C, N, order, to_request, to_model, ids.to(dev), positions.to(dev), attention.to(dev))


class Engine:
    def __init__(self, spec: InitSpec, d: Dist) -> None:
        self.spec = spec
        self.dist = d
        # Called with (done, total) after each micro-batch of a logprobs or train_step request; the
        # worker turns it into a progress event, so a long update is told apart from a hung one.
        self.progress: Callable[..., None] = lambda done, total, resumed=False: None
        self.device = pick_device(spec.device, d)
        if spec.dtype not in DTYPES:
            raise RequestError(f"init: dtype must be one of {sorted(DTYPES)} (got {spec.dtype!r})")
        if spec.autocast not in (None, "bfloat16", "float16"):
            raise RequestError(f"init: autocast must be null, 'bfloat16' or 'float16' (got {spec.autocast!r})")
        if spec.autocast and self.device.type == "cpu":
            check_cpu_autocast(spec.autocast, spec.dtype)
        # Decided (or refused) before the model loads; LoRA is what lora or adapter_dir will give it.
        self.base_bf16 = resolve_base_bf16(spec, self.device, spec.lora is not None or spec.adapter_dir is not None, d.world)
        if not os.path.isfile(os.path.join(spec.model_dir, "config.json")):
            raise RequestError(f"init: {spec.model_dir} has no config.json (a model directory needs config.json, the safetensors weights and tokenizer.json)")
        model = self._load_model(spec)
        # Scoring rows are right-padded, so the causal mask alone already keeps every real token from
        # seeing a pad (pads only ever come after it): no padding mask is passed, and SDPA runs its causal
        # kernel, which skips the blocks above the diagonal instead of computing them and reading a
        # [B, 1, L, L] mask. True restores the explicit mask (bench/update-variants.py compares the two).
        self.mask_padding = False
        # Whether a training pass keeps attention probabilities ([heads, L, L] per layer) for its backward:
        # only the eager path does; SDPA's fused CPU and GPU kernels keep one log-sum-exp per row.
        self.attention_probs_stored = spec.attn_implementation == "eager"
        # Dropout in training (LoRA's lora_dropout) keeps a copy of its input and a mask per adapter.
        self.active_dropout = any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
        if spec.autocast and self.device.type == "cpu":
            fp32_output_layer(self._causal_lm(model))
            bf16_frozen_linears(self._causal_lm(model))
        if self.base_bf16:
            bf16_base_products(self._causal_lm(model))
        self.checkpointing = False
        if spec.gradient_checkpointing:
            self._set_checkpointing(model, True)
        model.to(self.device)
        # Names under which a parameter appears a second time (tied input and output embeddings): a full
        # state dict gathered from FSDP holds them twice, and a saved model must hold them once.
        seen: set[int] = set()
        self.tied_names: set[str] = set()
        for name, p in model.named_parameters(remove_duplicate=False):
            if id(p) in seen:
                self.tied_names.add(name)
            seen.add(id(p))
        if d.world > 1:
            self._shard(model)
        self.model = model
        if spec.activation_mb is None and self.device.type == "cpu":
            # A third of what is free now (the model, optimiser and KV caches are loaded already), in whole MiB:
            # the trainer records it in the run's config, and a resume passes it back as it was.
            spec.activation_mb = float(math.floor(available_memory_mb() / 3))
        self.model.eval()
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not trainable:
            raise RequestError("init: the model has no trainable parameters (check lora.target_modules)")
        self.params = [p for _, p in trainable]
        self.base_lr = float(spec.optimizer["lr"])
        self.optimizer = self._adamw(trainable)
        if spec.optimizer_state:
            self._load_optimizer(spec.optimizer_state)
        # KV caches outlive a call only for models whose every layer attends to the whole prefix.
        self.reuses_prefixes = full_attention_only(self._causal_lm().config)
        # Trunk-plus-branches sequences (./branches.py): through the SDPA attention function, in one process,
        # on models whose every layer attends to the whole prefix.
        self.branch_attention = None
        if spec.attn_implementation == "sdpa" and d.world == 1 and self.reuses_prefixes:
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

            self.branch_attention = install_branch_attention(ALL_ATTENTION_FUNCTIONS)
        self.prefix_cache = PrefixCache(int(spec.kv_cache_mb * 2**20))
        self._token_bytes: Any = None  # per-token bytes for stop strings, built on first use
        self.tokenizer = None
        tok_path = os.path.join(spec.model_dir, "tokenizer.json")
        if os.path.isfile(tok_path):
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(tok_path)

    # ------------------------------------------------------------------ set-up helpers

    def _load_model(self, spec: InitSpec) -> torch.nn.Module:
        """The model of spec.model_dir in spec.dtype, with its LoRA adapters (loaded, or fresh ones seeded by spec.seed)."""
        from transformers import AutoModelForCausalLM

        torch.manual_seed(spec.seed)
        try:
            if spec.random_weights:
                from transformers import AutoConfig

                config = AutoConfig.from_pretrained(spec.model_dir)
                # Drawn where they will live: a 7B model initialised on the CPU takes minutes.
                with torch.device(self.device):
                    model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[spec.dtype], attn_implementation=spec.attn_implementation)
            else:
                model = AutoModelForCausalLM.from_pretrained(spec.model_dir, dtype=DTYPES[spec.dtype], attn_implementation=spec.attn_implementation)
        except (OSError, ValueError, KeyError) as e:
            raise RequestError(f"init: cannot load the model in {spec.model_dir}: {e}") from e
        self.vocab_size = int(model.config.vocab_size)
        if not (0 <= spec.pad_token < self.vocab_size):
            raise RequestError(f"init: pad_token {spec.pad_token} is outside the vocabulary (0..{self.vocab_size - 1})")
        model.config.use_cache = False
        self.lora = spec.lora is not None or spec.adapter_dir is not None
        if spec.adapter_dir is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, spec.adapter_dir, is_trainable=True)
        elif spec.lora is not None:
            from peft import LoraConfig, get_peft_model

            lc = spec.lora
            model = get_peft_model(
                model,
                LoraConfig(
                    r=int(lc["r"]),
                    lora_alpha=float(lc["alpha"]),
                    lora_dropout=float(lc.get("dropout", 0.0)),
                    # A string is PEFT's regular-expression (or 'all-linear') form; a list names modules.
                    target_modules=lc["target_modules"] if isinstance(lc["target_modules"], str) else list(lc["target_modules"]),
                    use_rslora=bool(lc.get("use_rslora", False)),
                    bias="none",
                    task_type="CAUSAL_LM",
                ),
            )
        return model

    def _adamw(self, trainable: list) -> torch.optim.AdamW:
        """AdamW over the trainable parameters with the spec's settings."""
        o = self.spec.optimizer
        # Decay on matrices only, never on norms or biases (as adamw.ts and Hugging Face's trainer).
        groups = [
            {"params": [p for _, p in trainable if p.ndim >= 2], "weight_decay": float(o["weight_decay"])},
            {"params": [p for _, p in trainable if p.ndim < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=self.base_lr, betas=(float(o["beta1"]), float(o["beta2"])), eps=float(o["eps"])
        )

    def _shard(self, model: torch.nn.Module) -> None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = None
        if self.spec.autocast:
            mp = MixedPrecisionPolicy(param_dtype=DTYPES[self.spec.autocast], reduce_dtype=torch.float32)
        kwargs = {"mp_policy": mp} if mp else {}
        for layer in self._causal_lm(model).model.layers:
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)

    def _causal_lm(self, model: Optional[torch.nn.Module] = None) -> torch.nn.Module:
        m = model if model is not None else self.model
        return m.get_base_model() if hasattr(m, "get_base_model") else m

    def _load_optimizer(self, path: str) -> None:
        if not os.path.isfile(path):
            raise RequestError(f"init: optimizer_state {path} does not exist")
        state = torch.load(path, map_location=self.device, weights_only=True)
        try:
            self.optimizer.load_state_dict(state)
        except (ValueError, KeyError) as e:
            raise RequestError(f"init: optimizer_state {path} does not fit this model's trainable parameters: {e}") from e
        if self.dist.world > 1:
            self._shard_optimizer_state()
        rng_path = os.path.join(os.path.dirname(path), RNG_STATE_FILE)
        if os.path.isfile(rng_path):
            try:
                saved = torch.load(rng_path, weights_only=True)
            except Exception as e:  # torch.load raises unpickling, EOF and runtime errors alike
                raise RequestError(f"init: {rng_path} is not a random state saved by this worker: {e}") from e
            # One state per rank under torchrun; a file from another world size restores nothing (dropout then
            # draws other masks than the straight run would, which changes no expectation).
            ranks = saved.get("ranks") if isinstance(saved, dict) else None
            if ranks is None and self.dist.world == 1:
                set_rng_states(saved)
            elif ranks is not None and len(ranks) == self.dist.world:
                set_rng_states(ranks[self.dist.rank])
            elif self.dist.rank == 0:
                print(f"{rng_path} was saved by {len(ranks) if ranks else 1} process(es), this worker runs {self.dist.world}: dropout's generators start afresh", file=sys.stderr)

    def _full_optimizer_state(self) -> dict[str, Any]:
        """
        The optimiser's state dict with every sharded moment gathered whole, on the CPU: one file format
        whatever the world size, so a checkpoint saved under torchrun resumes in one process and back.
        Collective under FSDP (every rank calls it, in the same order).
        """
        sd = self.optimizer.state_dict()
        state: dict[Any, dict[str, Any]] = {}
        for key, per_param in sd["state"].items():
            # state_dict() hands out the live per-parameter dicts: build new ones rather than edit them.
            state[key] = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in per_param.items()}
            state[key] = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in state[key].items()}
        return {"state": state, "param_groups": sd["param_groups"]}

    def _shard_optimizer_state(self) -> None:
        """After loading whole moments into an optimiser over FSDP parameters: each rank keeps its shard, as its parameter does."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        for p in self.params:
            per_param = self.optimizer.state.get(p)
            if not per_param or not isinstance(p, DTensor):
                continue
            for k, v in per_param.items():
                if isinstance(v, torch.Tensor) and not isinstance(v, DTensor) and v.dim() > 0:
                    per_param[k] = distribute_tensor(v.to(self.device), p.device_mesh, p.placements)

    def info(self) -> dict[str, Any]:
        total = sum(p.numel() for p in self.model.parameters())
        trainable = sum(p.numel() for p in self.params)
        if self.dist.world > 1:
            # Under FSDP each rank holds a shard; report the whole model.
            t = torch.tensor([total, trainable], dtype=torch.int64, device=self.device)
            self.dist.sum_(t)
            total, trainable = int(t[0]), int(t[1])
        return {
            "model_type": self._causal_lm().config.model_type,
            "vocab_size": self.vocab_size,
            "parameters": total,
            "trainable_parameters": trainable,
            "device": str(self.device),
            "dtype": self.spec.dtype,
            "autocast": self.spec.autocast,
            "base_bf16": self.base_bf16,
            "lora": self.lora,
            "gradient_checkpointing": self.spec.gradient_checkpointing,  # null: auto (on where needed)
            "world_size": self.dist.world,
            "branches": self.branch_attention is not None,
            "threads": torch.get_num_threads(),
            "activation_mb": self.spec.activation_mb,
            "kv_cache": {**self.prefix_cache.stats(), "bytes_per_token": self.kv_bytes_per_token(), "prefix_reuse": self.reuses_prefixes and self.dist.world == 1},
        }

    def kv_bytes_per_token(self) -> int:
        c = self._causal_lm().config.get_text_config(decoder=True)
        heads = int(getattr(c, "num_key_value_heads", None) or c.num_attention_heads)
        head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
        return int(c.num_hidden_layers) * 2 * heads * head_dim * DTYPES[self.spec.dtype].itemsize

    def _autocast(self):
        if self.spec.autocast:
            return torch.autocast(device_type=self.device.type, dtype=DTYPES[self.spec.autocast])
        return contextlib.nullcontext()

    def check_ids(self, ids: Sequence[int], where: str) -> None:
        for j, tok in enumerate(ids):
            if not (0 <= tok < self.vocab_size):
                raise RequestError(f"{where}[{j}] = {tok} is outside the vocabulary (0..{self.vocab_size - 1})")

    # ------------------------------------------------------------------ scoring

    def activation_bytes(self, width: int, training: bool, checkpointing: Optional[bool] = None) -> int:
        """
        Activation memory one token of a `width`-token sequence holds in a forward pass, an estimate on
        the generous side: per layer the hidden states around attention and the MLP, the MLP's three
        projections, and, on the eager attention path only, the attention probabilities (heads x width,
        kept for the backward pass). Active dropout (LoRA's) keeps a copy of every adapter's input and
        its mask on top. Without gradients one layer is alive at a time; with gradient checkpointing,
        every layer's input plus one layer's activations.

        Training is counted in fp32 elements even under bf16 autocast: the norms, residuals and
        softmax statistics stay fp32 there. Peak resident memory measured with bench/update-variants.py
        (SmolLM2-135M, LoRA r16 on all linear layers, one 1,870-token episode, no checkpointing), per
        token and layer, against this estimate: fp32 63-75 KB (estimate 77), fp32 + dropout 97-111 KB
        (118), bf16 autocast 42-48 KB and with dropout 66-68 KB (77 and 118).
        """
        c = self._causal_lm().config
        layers, hidden, inter, heads = c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.num_attention_heads
        per_layer = 20 * hidden + 5 * inter + (2 * heads * width if self.attention_probs_stored else 0)
        if not training:
            return per_layer * torch.finfo(DTYPES[self.spec.autocast or self.spec.dtype]).bits // 8
        element = torch.finfo(DTYPES[self.spec.dtype]).bits // 8
        if self.active_dropout:
            per_layer += 10 * hidden + 3 * inter
        if self.checkpointing if checkpointing is None else checkpointing:
            return (layers * hidden + per_layer) * element
        return layers * per_layer * element

    def _set_checkpointing(self, model: torch.nn.Module, on: bool) -> None:
        """Gradient checkpointing on or off; non-reentrant, which works with frozen inputs (LoRA) and with FSDP."""
        if on == self.checkpointing:
            return
        if on:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 renamed it
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            (getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable)()
        self.checkpointing = on

    def _checkpoint_if_needed(self, seqs: Sequence[Seq], indices: Sequence[int]) -> None:
        """
        gradient_checkpointing null (auto): on for a training step only when one of its sequences would not
        fit the activation budget without it (long full-history episodes on CPU), off otherwise (faster).
        """
        if self.spec.gradient_checkpointing is not None or not self.spec.activation_mb or self.dist.world > 1:
            return
        budget = self.spec.activation_mb * 2**20
        widths = [len(seqs[i].prompt) + len(seqs[i].response) for i in indices]
        # A branch runs alone at the least (_branch_chunks): its tokens' activations count as a sequence's.
        widths += [len(b.ids) for i in indices for b in seqs[i].branches or []]
        self._set_checkpointing(self.model, any(w * self.activation_bytes(w, True, checkpointing=False) > budget for w in widths))

    def micro_batches(self, seqs: Sequence[Seq], indices: Sequence[int], training: bool = False) -> list[list[int]]:
        """
        Groups sorted by length under the padded-token budget (the same rule as engine.ts) and, when
        training with an activation budget, under that too. A sequence that alone exceeds the
        activation budget is refused with what would make it fit.
        """
        order = sorted(indices, key=lambda i: (len(seqs[i].prompt) + len(seqs[i].response), i))
        budget = self.spec.activation_mb * 2**20 if training and self.spec.activation_mb else None
        groups: list[list[int]] = []
        branched: list[list[int]] = []
        current: list[int] = []
        for i in order:
            width = len(seqs[i].prompt) + len(seqs[i].response)
            if seqs[i].branches and budget is not None and width * self.activation_bytes(width, True) > budget:
                need = width * self.activation_bytes(width, True) / 2**30
                hint = "shorten the episodes (env.max_steps, prompt.history)" if self.checkpointing else "set model.torch.gradient_checkpointing: true (or null: on where needed)"
                raise RequestError(f"train_step: a {width}-token trunk needs about {need:.1f} GiB of activations, over the {budget / 2**30:.1f} GiB budget (activation_mb); {hint}")
            if seqs[i].branches:
                # A trunk with branches is a micro-batch of its own, its branches run in batches under the budgets (_branch_chunks).
                branched.append([i])
                continue
            if budget is not None and width * self.activation_bytes(width, True) > budget:
                need = width * self.activation_bytes(width, True) / 2**30
                hint = "shorten the episodes (env.max_steps, prompt.history)" if self.checkpointing else "set model.torch.gradient_checkpointing: true (or null: on where needed)"
                raise RequestError(f"train_step: a {width}-token sequence needs about {need:.1f} GiB of activations, over the {budget / 2**30:.1f} GiB budget (activation_mb); {hint}")
            full = (len(current) + 1) * width > self.spec.micro_batch_tokens
            if budget is not None:
                full = full or (len(current) + 1) * width * self.activation_bytes(width, True) > budget
            if current and full:
                groups.append(current)
                current = []
            current.append(i)
        if current:
            groups.append(current)
        return groups + branched

    def _branch_chunks(self, s: Seq, training: bool) -> list[list[Branch]]:
        """
        A branched sequence's branches in batches, in order: at most micro_batch_tokens padded branch tokens
        each and, training with an activation budget, the branch tokens' activations (they attend to
        trunk + branch positions) and the trunk keys and values each row holds, within it. A branch that
        alone exceeds it runs alone (it is shorter than the step's own sequence it stands for).
        """
        trunk_len = len(s.prompt) + len(s.response)
        budget = self.spec.activation_mb * 2**20 if training and self.spec.activation_mb else None
        c = self._causal_lm().config
        # What each row's causal SDPA pass over [trunk, branch] holds per layer and position: keys and values (repeated per
        # query head where SDPA repeats them), and as much again for its queries and outputs (the placeholder form; the merged
        # form holds less).
        kv_row = 2 * self.kv_bytes_per_token() * max(1, c.num_attention_heads // int(getattr(c, "num_key_value_heads", None) or c.num_attention_heads))
        chunks: list[list[Branch]] = []
        current: list[Branch] = []
        width = 0
        for b in s.branches or []:
            w = max(width, len(b.ids))
            n = len(current) + 1
            full = n * w > self.spec.micro_batch_tokens
            if budget is not None:
                full = full or n * (w * self.activation_bytes(trunk_len + w, True) + (trunk_len + w) * kv_row) > budget
            if current and full:
                chunks.append(current)
                current, w = [], len(b.ids)
            current.append(b)
            width = w
        if current:
            chunks.append(current)
        return chunks

    def _branch_pass(self, branches: list[Branch], kv: dict, temperature: float, then: Callable[[torch.Tensor], None]) -> None:
        """Scores a batch of branches over the trunk's keys and values `kv`; `then` gets their log-probs (flattened in order) while the trunk is still in place, so that a backward in it may recompute checkpointed layers."""
        batch = branch_batch(branches, self.spec.pad_token)
        with self.branch_attention.branching(kv, [b.prefix for b in branches]):
            then(self._scored_logprobs(batch.keep, batch.targets, temperature, input_ids=batch.ids.to(self.device), position_ids=batch.positions.to(self.device), attention_mask=None))

    def _branched_logprobs(self, s: Seq, temperature: float) -> torch.Tensor:
        """log-probs of a trunk-plus-branches sequence (no gradients): the trunk's scored tokens, then each branch's."""
        with self.branch_attention.recording() as kv:
            parts = [self.response_logprobs([Seq(s.prompt, s.response, policy_tokens=s.policy_tokens)], temperature)]
        for chunk in self._branch_chunks(s, training=False):
            self._branch_pass(chunk, kv, temperature, parts.append)
        return torch.cat(parts)

    def _train_branched(self, s: Seq, cfg: ObjectiveConfig, temperature: float, loss_scale: float) -> torch.Tensor:
        """
        Accumulates the gradient of a trunk-plus-branches sequence's loss sum (./branches.py): the trunk with
        gradients, its keys and values detached into leaves, each branch batch's backward into the weights
        and those leaves, then one backward through the trunk of its own loss and the leaves' gradients.
        Returns [loss_sum, tokens, clipped, ratio_sum, kl_sum].
        """
        stats = torch.zeros(5, dtype=torch.float64, device=self.device)

        def terms_of(logp: torch.Tensor, start: int, end: int):
            cut = lambda xs: torch.tensor(xs[start:end], dtype=torch.float32, device=self.device)
            terms = objective_terms(
                logp,
                cut(s.old_logprobs),
                cut(s.advantages),
                cut(s.mask),
                cut(s.ref_logprobs if s.ref_logprobs is not None else s.old_logprobs) if cfg.kl_coef > 0 else None,
                cfg,
                torch.full((end - start,), 1.0 if s.low_prob_mask else 0.0, device=self.device) if cfg.low_prob_delta is not None else None,
            )
            stats.add_(torch.stack([terms.loss_sum, terms.tokens, terms.clipped, terms.ratio_sum, terms.kl_sum]).detach().double())
            return terms

        with self.branch_attention.recording() as kv:
            trunk_logp = self.response_logprobs([Seq(s.prompt, s.response, policy_tokens=s.policy_tokens)], temperature)
        layers = sorted(kv)
        trunk_kv = [t for layer in layers for t in kv[layer]]
        leaves = [t.detach().requires_grad_(True) for t in trunk_kv]
        leaf_kv = {layer: (leaves[2 * i], leaves[2 * i + 1]) for i, layer in enumerate(layers)}
        at = s.trunk_scored
        for chunk in self._branch_chunks(s, training=True):
            n = sum(b.scored for b in chunk)

            def backward(logp: torch.Tensor, start: int = at, end: int = at + n) -> None:
                (terms_of(logp, start, end).loss_sum * loss_scale).backward()

            self._branch_pass(chunk, leaf_kv, temperature, backward)
            at += n
        trunk_loss = terms_of(trunk_logp, 0, s.trunk_scored).loss_sum * loss_scale
        outputs: list[torch.Tensor] = [trunk_loss] if trunk_loss.requires_grad else []
        grads: list[Optional[torch.Tensor]] = [None] * len(outputs)
        for t, leaf in zip(trunk_kv, leaves):
            if leaf.grad is not None and t.requires_grad:
                outputs.append(t)
                grads.append(leaf.grad)
        if outputs:
            torch.autograd.backward(outputs, grads)
        return stats

    def response_logprobs(self, seqs: Sequence[Seq], temperature: float) -> torch.Tensor:
        """log pi(response_t | prompt, response_<t) for every scored response token, flattened in order, fp32."""
        B = len(seqs)
        L = max(len(s.prompt) + len(s.response) for s in seqs)
        ids = torch.full((B, L), self.spec.pad_token, dtype=torch.long)
        attention = torch.zeros((B, L), dtype=torch.long)
        keep = torch.zeros((B, L), dtype=torch.bool)
        targets: list[int] = []
        for b, s in enumerate(seqs):
            n = len(s.prompt) + len(s.response)
            ids[b, :n] = torch.tensor(s.prompt + s.response, dtype=torch.long)
            attention[b, :n] = 1
            # The hidden state before each response token predicts it.
            if s.policy_tokens is None:
                keep[b, len(s.prompt) - 1 : n - 1] = True
                targets.extend(s.response)
            else:
                scored = [j for j, p in enumerate(s.policy_tokens) if p]
                keep[b, [len(s.prompt) - 1 + j for j in scored]] = True
                targets.extend(s.response[j] for j in scored)
        mask = attention.to(self.device) if self.mask_padding else None
        return self._scored_logprobs(keep, targets, temperature, input_ids=ids.to(self.device), attention_mask=mask)

    def _scored_logprobs(self, keep: torch.Tensor, targets: list[int], temperature: float, **inputs: Any) -> torch.Tensor:
        """Runs the model on `inputs`; the log-probs of `targets` at the positions `keep` marks ([B, L], row-major order)."""
        keep = keep.to(self.device)

        # Only scored positions reach the output layer (a [B, L, V] logits tensor of a 150k-token
        # vocabulary would dwarf the model). A pre-hook on the output layer picks them, rather than a
        # boolean logits_to_keep, which only recent transformers releases accept; the head still runs
        # inside the model's forward, as FSDP needs. h[keep] flattens row-major: sequence order.
        def responses_only(_module: torch.nn.Module, args: tuple) -> tuple:
            return (args[0][keep],) + tuple(args[1:])

        hook = self._causal_lm().get_output_embeddings().register_forward_pre_hook(responses_only)
        try:
            with self._autocast():
                out = self.model(**inputs, logits_to_keep=0, use_cache=False)
        finally:
            hook.remove()
        logits = out.logits.float()  # [n, V]
        if temperature != 1:
            logits = logits / temperature
        target = torch.tensor(targets, dtype=torch.long, device=self.device)
        return logits.gather(1, target[:, None]).squeeze(1) - torch.logsumexp(logits, dim=1)

    @torch.no_grad()
    def logprobs(self, seqs: list[Seq], temperature: float) -> list[list[float]]:
        self.model.eval()
        mine = self.dist.shard(len(seqs))
        groups = self.micro_batches(seqs, mine)
        rounds = self.dist.max_int(len(groups), self.device)
        result: dict[int, list[float]] = {}
        for r in range(rounds):
            if r >= len(groups):
                self.response_logprobs([Seq([self.spec.pad_token], [self.spec.pad_token])], 1.0)  # keeps FSDP in step
                continue
            group = groups[r]
            if all(seqs[i].scored == 0 for i in group) and self.dist.world == 1:
                for i in group:
                    result[i] = []
                continue
            if seqs[group[0]].branches:
                flat = self._branched_logprobs(seqs[group[0]], temperature).cpu().tolist()
            else:
                flat = self.response_logprobs([seqs[i] for i in group], temperature).cpu().tolist()
            at = 0
            for i in group:
                n = seqs[i].scored
                result[i] = flat[at : at + n]
                at += n
            self.progress(r + 1, rounds)
        merged: dict[int, list[float]] = {}
        for part in self.dist.gather(result):
            merged.update(part)
        return [merged[i] for i in range(len(seqs))]

    # ------------------------------------------------------------------ generation

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int,
        end_tokens: list[int],
        stop_strings: list[str],
        allowed: Optional[list[Optional[list[list[int]]]]],
        cache_keys: Optional[list[Optional[str]]] = None,
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """The generations and {prefill_tokens, reused_tokens}: prompt tokens run through the model and those taken from kept caches."""
        self.model.eval()
        if stop_strings and self.tokenizer is None:
            raise RequestError("generate: stop strings need tokenizer.json in the model directory")
        mine = self.dist.shard(len(prompts))
        local = [prompts[i] for i in mine] or [[self.spec.pad_token]]  # an idle rank still runs every step
        rows_allowed = [allowed[i] if allowed else None for i in mine] or [None]
        # Under FSDP a key's row may land on another rank next time, so keys are not used there.
        keys = [cache_keys[i] for i in mine] if cache_keys and self.reuses_prefixes and self.dist.world == 1 else None
        with self._autocast():  # one context around every step: autocast's cast cache then lasts the whole call
            rows, stats = self._generate_local(local, keys, max_tokens, temperature, top_p, seed + 1_000_003 * self.dist.rank, end_tokens, stop_strings, rows_allowed)
        result = dict(zip(mine, rows))
        merged: dict[int, dict[str, Any]] = {}
        total = {"prefill_tokens": 0, "reused_tokens": 0}
        for part, part_stats in self.dist.gather((result, stats)):
            merged.update(part)
            for k in total:
                total[k] += part_stats[k]
        return [merged[i] for i in range(len(prompts))], total

    def release_cache(self, keys: Sequence[str]) -> int:
        return sum(self.prefix_cache.drop(k) for k in keys)

    def _stop_checker(self, stop_strings: list[str], rows: int):
        if self._token_bytes is None:
            self._token_bytes = token_byte_table(self.tokenizer, self.tokenizer.get_vocab_size(with_added_tokens=True)) or False
        if self._token_bytes:
            return ByteStops(self._token_bytes, stop_strings, rows, self.device)
        return StreamStops(self.tokenizer, stop_strings, rows)

    def _generate_local(self, prompts, keys, max_tokens, temperature, top_p, seed, end_tokens, stop_strings, allowed):
        rows = _RowLayout.of(prompts, keys, self.prefix_cache, self.spec.pad_token, max_tokens, self.device)
        logits, cache = self._prefill(rows, max_tokens)
        sampling = _Sampling(max_tokens, temperature, top_p, seed, end_tokens, stop_strings, allowed)
        n_tokens, all_tokens, all_logprobs, was_stopped, cache, fed = self._decode(rows, logits, cache, sampling)
        out = [
            {"tokens": all_tokens[b][: n_tokens[b]], "logprobs": all_logprobs[b][: n_tokens[b]], "finish": "stop" if was_stopped[b] else "length"}
            for b in range(rows.B)
        ]
        if keys:
            self._keep_prefixes(rows, keys, cache, [min(n, fed) for n in n_tokens], all_tokens)
        stats = {"prefill_tokens": sum(len(n) for n in rows.new), "reused_tokens": sum(rows.reuse)}
        return out, stats

    def _prefill(self, rows: "_RowLayout", max_tokens: int):
        """Runs every row's new prompt tokens (in groups of similar width, in chunks); the logits of each row's last token, and the cache."""
        B, C, N, order = rows.B, rows.C, rows.N, rows.order
        config = self._causal_lm().config
        widths = [len(rows.new[b]) for b in order]
        if self.reuses_prefixes:
            batched = BatchedCache(config, [rows.held[b] for b in order], [rows.reuse[b] for b in order], C + N + max_tokens)
            # Under FSDP every rank must run the same forward passes: one group, one chunk.
            groups = prefill_groups(widths) if self.dist.world == 1 else [(0, B)]
        else:
            batched, groups = None, [(0, B)]  # HF's own cache, whatever the model's layer types need
            cache = DynamicCache(config=config)
        last_logits = []
        with self._autocast():
            for start, end in groups:
                # Columns C + N - width .. C + N hold this group's new tokens; the prefill runs in
                # chunks of at most micro_batch_tokens padded tokens.
                width = widths[start]
                if batched is not None:
                    cache = batched.rows(start, end, C + N - width)
                chunk = width if self.dist.world > 1 else max(1, self.spec.micro_batch_tokens // (end - start))
                for s in range(N - width, N, chunk):
                    e = min(N, s + chunk)
                    out = self.model(
                        input_ids=rows.ids[start:end, s:e],
                        attention_mask=rows.attention[start:end, : C + e],
                        position_ids=rows.positions[start:end, s:e],
                        past_key_values=cache,
                        use_cache=True,
                        logits_to_keep=1,
                    )
                    cache = out.past_key_values
                last_logits.append(out.logits[:, -1, :])
        if batched is not None:
            cache = batched.rows(0, B, C + N)
        return torch.cat(last_logits)[rows.to_request], cache

    def _decode(self, rows: "_RowLayout", logits, cache, g: "_Sampling"):
        """Samples up to max_tokens per row, one batched step at a time; per row its tokens, log-probs and whether a stop ended it, with the cache and the decoded tokens run through the model."""
        B, C, N, dev, max_tokens = rows.B, rows.C, rows.N, self.device, g.max_tokens
        next_position = torch.tensor([rows.reuse[b] + len(rows.new[b]) for b in rows.order], dtype=torch.long, device=dev)
        generator = torch.Generator(device=dev).manual_seed(g.seed)
        tries = TokenTries(g.allowed, dev) if any(a for a in g.allowed) else None
        stops = self._stop_checker(g.stop_strings, B) if g.stop_strings else None
        end = torch.tensor(g.end_tokens, dtype=torch.long, device=dev)
        tokens = torch.zeros((B, max_tokens), dtype=torch.long, device=dev)
        logprobs = torch.zeros((B, max_tokens), dtype=torch.float32, device=dev)
        lengths = torch.zeros(B, dtype=torch.long, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        stopped = torch.zeros(B, dtype=torch.bool, device=dev)
        fed = 0  # decoded tokens run through the model (the last one sampled never is)
        for step in range(max_tokens):
            choice, logp = choose(logits, g.temperature, g.top_p, tries.allowed(logits.shape[-1]) if tries else None, generator)
            tokens[:, step] = choice
            logprobs[:, step] = logp
            alive = ~done
            lengths += alive
            finished = torch.isin(choice, end)
            if stops is not None:
                finished |= stops.step(choice)
            newly = alive & finished
            stopped |= newly
            done |= newly
            if tries is not None:
                tries.advance(choice, done)
            if step == max_tokens - 1:
                break
            if self.dist.world > 1:
                if self.dist.max_int(0 if bool(done.all()) else 1, dev) == 0:
                    break
            elif bool(done.all()):
                break
            with self._autocast():
                out = self.model(
                    input_ids=choice[rows.to_model][:, None],
                    attention_mask=rows.attention[:, : C + N + step + 1],
                    position_ids=(next_position + step)[:, None],
                    past_key_values=cache,
                    use_cache=True,
                )
            cache = out.past_key_values
            logits = out.logits[:, -1, :][rows.to_request]
            fed += 1
        return lengths.tolist(), tokens.tolist(), logprobs.tolist(), stopped.tolist(), cache, fed

    def _keep_prefixes(self, rows: "_RowLayout", keys, cache, kept: list[int], all_tokens) -> None:
        """Keeps each keyed row's prompt and the decoded tokens run through the model (`kept` of them) as its prefix cache."""
        C, N, dev = rows.C, rows.N, self.device
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        protected = frozenset(k for k in keys if k is not None)
        row_of = {b: row for row, b in enumerate(rows.order)}
        for b, key in enumerate(keys):
            if key is None:
                continue
            columns = torch.cat(
                [torch.arange(C - rows.reuse[b], C), torch.arange(C + N - len(rows.new[b]), C + N), torch.arange(C + N, C + N + kept[b])]
            ).to(dev)
            held_tokens = torch.tensor(rows.prompts[b] + all_tokens[b][: kept[b]], dtype=torch.long)
            self.prefix_cache.put(key, CachedPrefix(held_tokens, extract(layers, row_of[b], columns)), protected)

    # ------------------------------------------------------------------ training

    def train_step(self, seqs: list[Seq], cfg: ObjectiveConfig, temperature: float, lr: Optional[float], resume: Optional[StepResume] = None) -> dict[str, float]:
        # The weights are about to change: caches computed with the old ones would no longer match.
        self.prefix_cache.clear()
        self.model.train()  # LoRA dropout and gradient checkpointing act only in training mode
        self.optimizer.zero_grad(set_to_none=True)
        try:
            mine = self.dist.shard(len(seqs))
            self._checkpoint_if_needed(seqs, mine)
            groups = [g for g in self.micro_batches(seqs, mine, training=True) if any(seqs[i].scored > 0 for i in g)]
            rounds = self.dist.max_int(len(groups), self.device)
            stats = torch.zeros(5, dtype=torch.float64, device=self.device)
            # FSDP averages gradients over ranks; scaling by the world size turns that into the sum.
            loss_scale = float(self.dist.world)
            # A step saved part-way (./step_resume.py) goes on after its saved micro-batches. One process only:
            # under FSDP each rank holds a shard of the gradients and a generator of its own.
            step_file = StepFile(resume.file, resume.every_seconds, resume.request, groups, self.params) if resume and self.dist.world == 1 else None
            first = 0
            saved = step_file.load(rounds) if step_file else None
            if saved:
                for p, g in zip(self.params, saved.grads):
                    p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype)
                stats.copy_(saved.stats)
                set_rng_states(saved.rng)
                first = saved.rounds_done
                self.progress(first, rounds, True)
            for r in range(first, rounds):
                if r >= len(groups):
                    logp = self.response_logprobs([Seq([self.spec.pad_token], [self.spec.pad_token])], 1.0)
                    (logp.sum() * 0.0).backward()  # keeps FSDP's collectives in step; contributes nothing
                    continue
                group = [seqs[i] for i in groups[r]]
                if group[0].branches:
                    stats += self._train_branched(group[0], cfg, temperature, loss_scale)
                    if step_file:
                        step_file.maybe_save(r + 1, rounds, stats, rng_states())
                    self.progress(r + 1, rounds)
                    continue
                logp = self.response_logprobs(group, temperature)
                flat = lambda pick: torch.tensor([x for s in group for x in pick(s)], dtype=torch.float32, device=self.device)
                terms = objective_terms(
                    logp,
                    flat(lambda s: s.old_logprobs),
                    flat(lambda s: s.advantages),
                    flat(lambda s: s.mask),
                    flat(lambda s: s.ref_logprobs if s.ref_logprobs is not None else s.old_logprobs) if cfg.kl_coef > 0 else None,
                    cfg,
                    flat(lambda s: [1.0 if s.low_prob_mask else 0.0] * s.scored) if cfg.low_prob_delta is not None else None,
                )
                (terms.loss_sum * loss_scale).backward()
                stats += torch.stack([terms.loss_sum, terms.tokens, terms.clipped, terms.ratio_sum, terms.kl_sum]).detach().double()
                if step_file:
                    step_file.maybe_save(r + 1, rounds, stats, rng_states())
                self.progress(r + 1, rounds)
            self.dist.sum_(stats)
            loss_sum, tokens, clipped, ratio_sum, kl_sum = (float(x) for x in stats.tolist())
            # Token mean over the whole batch: the sums are exact, so divide once here.
            denom = max(1.0, tokens)
            grads = [p.grad for p in self.params if p.grad is not None]
            for g in grads:
                g.div_(denom)
            sq = torch.zeros((), dtype=torch.float64, device=self.device)
            for g in grads:
                local = g.to_local() if hasattr(g, "to_local") else g
                sq += local.double().pow(2).sum()
            grad_norm = math.sqrt(float(self.dist.sum_(sq)))
            max_norm = self.spec.max_grad_norm
            if max_norm > 0 and grad_norm > max_norm:
                for g in grads:
                    g.mul_(max_norm / grad_norm)
            if tokens > 0:
                for group in self.optimizer.param_groups:
                    group["lr"] = self.base_lr if lr is None else lr
                self.optimizer.step()
            return {
                "loss": loss_sum / denom,
                "tokens": tokens,
                "clip_fraction": clipped / denom,
                "mean_ratio": ratio_sum / denom,
                "kl": kl_sum / denom,
                "grad_norm": grad_norm,
                "resumed_micro_batches": first,
            }
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.model.eval()

    # ------------------------------------------------------------------ saving

    def save(self, out_dir: str, merged: bool, with_optimizer: bool) -> dict[str, Any]:
        """Writes a Hugging Face model directory (or a PEFT adapter); only rank 0 touches the disk."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if merged and self.lora and self.dist.world > 1:
            raise RequestError("save: merged LoRA saving is not supported under FSDP; save the adapter (merged: false) and merge offline with PEFT")
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=full) if self.dist.world > 1 else None
        if state is not None:
            state = {k: v for k, v in state.items() if k not in self.tied_names}
        optim_state = self._full_optimizer_state() if with_optimizer else None
        # Dropout draws from torch's global generator: without its state a resumed run would draw other
        # masks than the straight one. Each rank has its own (gathered to rank 0, in rank order).
        rng = (rng_states() if self.dist.world == 1 else {"ranks": self.dist.gather(rng_states())}) if with_optimizer else None
        written: list[str] = []
        if self.dist.rank == 0:
            os.makedirs(out_dir, exist_ok=True)
            if self.lora and not merged:
                self.model.save_pretrained(out_dir, state_dict=state)
            elif self.lora:
                import copy

                # Merging changes the weights in place; merge a copy so training can go on with adapters.
                plain = copy.deepcopy(self.model)
                if self.spec.dtype == "float32":
                    # Base weights kept in bf16 for CPU autocast or base_bf16 (bf16_frozen_linears): merge in fp32, or
                    # rounding to bf16 would swallow most of the small adapter update.
                    for module in plain.modules():
                        if isinstance(module, torch.nn.Linear) and module.weight.dtype != torch.float32:
                            module.float()
                plain = plain.merge_and_unload()
                plain.save_pretrained(out_dir)
                del plain
            else:
                self._causal_lm().save_pretrained(out_dir, state_dict=state)
            self._patch_config(out_dir)
            for name in TOKENIZER_FILES:
                src = os.path.join(self.spec.model_dir, name)
                if os.path.isfile(src) and os.path.abspath(src) != os.path.abspath(os.path.join(out_dir, name)):
                    shutil.copyfile(src, os.path.join(out_dir, name))
            if optim_state is not None:
                torch.save(optim_state, os.path.join(out_dir, "optimizer.pt"))
                torch.save(rng, os.path.join(out_dir, RNG_STATE_FILE))
            written = sorted(os.listdir(out_dir))
        if self.dist.enabled:
            dist.barrier()
        return {"dir": out_dir, "files": written, "format": "peft-adapter" if self.lora and not merged else "model"}

    @staticmethod
    def _patch_config(out_dir: str) -> None:
        # transformers 5 nests rope_theta under rope_parameters; readers that expect the classic
        # top-level key (the TypeScript engine, older transformers) need it there too.
        path = os.path.join(out_dir, "config.json")
        if not os.path.isfile(path):
            return
        with open(path) as f:
            config = json.load(f)
        rope = config.get("rope_parameters")
        if "rope_theta" not in config and isinstance(rope, dict) and "rope_theta" in rope:
            config["rope_theta"] = rope["rope_theta"]
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(config, f, indent=2)
                f.write("\n")
            os.replace(tmp, path)
