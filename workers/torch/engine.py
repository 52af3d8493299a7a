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
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from objective import ObjectiveConfig, objective_terms

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


@dataclass
class InitSpec:
    model_dir: str
    device: str
    dtype: str
    autocast: Optional[str]
    gradient_checkpointing: bool
    attn_implementation: str
    lora: Optional[dict[str, Any]]
    adapter_dir: Optional[str]
    optimizer: dict[str, float]
    optimizer_state: Optional[str]
    max_grad_norm: float
    micro_batch_tokens: int
    pad_token: int
    seed: int


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


class TokenTrie:
    """Prefix trie over allowed responses (each ending in the end token), as src/policy/constrained.ts."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self.root: dict[int, dict] = {}
        for seq in sequences:
            node = self.root
            for tok in seq:
                node = node.setdefault(int(tok), {})

    def allowed_after(self, prefix: Sequence[int]) -> list[int]:
        node: Optional[dict] = self.root
        for tok in prefix:
            node = node.get(tok) if node is not None else None
            if node is None:
                return []
        return list(node.keys())


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
    if d.world > 1:
        raise RequestError("init: several ranks need device 'cuda' (FSDP over CPU processes is not supported)")
    return torch.device("cpu")


class Engine:
    def __init__(self, spec: InitSpec, d: Dist) -> None:
        from transformers import AutoModelForCausalLM

        self.spec = spec
        self.dist = d
        self.device = pick_device(spec.device, d)
        if spec.dtype not in DTYPES:
            raise RequestError(f"init: dtype must be one of {sorted(DTYPES)} (got {spec.dtype!r})")
        if spec.autocast not in (None, "bfloat16", "float16"):
            raise RequestError(f"init: autocast must be null, 'bfloat16' or 'float16' (got {spec.autocast!r})")
        if spec.autocast and self.device.type != "cuda":
            raise RequestError("init: autocast is for GPUs; on CPU use dtype 'float32' and no autocast")
        if not os.path.isfile(os.path.join(spec.model_dir, "config.json")):
            raise RequestError(f"init: {spec.model_dir} has no config.json (a model directory needs config.json, the safetensors weights and tokenizer.json)")
        torch.manual_seed(spec.seed)
        try:
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
        if spec.gradient_checkpointing:
            # Non-reentrant checkpointing works with frozen inputs (LoRA) and with FSDP.
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 renamed it
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.to(self.device)
        if d.world > 1:
            self._shard(model)
        self.model = model
        self.model.eval()
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not trainable:
            raise RequestError("init: the model has no trainable parameters (check lora.target_modules)")
        self.params = [p for _, p in trainable]
        o = spec.optimizer
        self.base_lr = float(o["lr"])
        # Decay on matrices only, never on norms or biases (as adamw.ts and Hugging Face's trainer).
        groups = [
            {"params": [p for _, p in trainable if p.ndim >= 2], "weight_decay": float(o["weight_decay"])},
            {"params": [p for _, p in trainable if p.ndim < 2], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=self.base_lr, betas=(float(o["beta1"]), float(o["beta2"])), eps=float(o["eps"])
        )
        if spec.optimizer_state:
            self._load_optimizer(spec.optimizer_state)
        self.tokenizer = None
        tok_path = os.path.join(spec.model_dir, "tokenizer.json")
        if os.path.isfile(tok_path):
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(tok_path)

    # ------------------------------------------------------------------ set-up helpers

    def _shard(self, model: torch.nn.Module) -> None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = None
        if self.spec.autocast:
            mp = MixedPrecisionPolicy(param_dtype=DTYPES[self.spec.autocast], reduce_dtype=torch.float32)
        kwargs = {"mp_policy": mp} if mp else {}
        layers = self._causal_lm().model.layers
        for layer in layers:
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
            "lora": self.lora,
            "gradient_checkpointing": self.spec.gradient_checkpointing,
            "world_size": self.dist.world,
            "threads": torch.get_num_threads(),
        }

    def _autocast(self):
        if self.spec.autocast:
            return torch.autocast(device_type=self.device.type, dtype=DTYPES[self.spec.autocast])
        return contextlib.nullcontext()

    def check_ids(self, ids: Sequence[int], where: str) -> None:
        for j, tok in enumerate(ids):
            if not (0 <= tok < self.vocab_size):
                raise RequestError(f"{where}[{j}] = {tok} is outside the vocabulary (0..{self.vocab_size - 1})")

    # ------------------------------------------------------------------ scoring

    def micro_batches(self, seqs: Sequence[Seq], indices: Sequence[int]) -> list[list[int]]:
        """Groups sorted by length under the padded-token budget (the same rule as engine.ts)."""
        order = sorted(indices, key=lambda i: (len(seqs[i].prompt) + len(seqs[i].response), i))
        groups: list[list[int]] = []
        current: list[int] = []
        for i in order:
            width = len(seqs[i].prompt) + len(seqs[i].response)
            if current and (len(current) + 1) * width > self.spec.micro_batch_tokens:
                groups.append(current)
                current = []
            current.append(i)
        if current:
            groups.append(current)
        return groups

    def response_logprobs(self, seqs: Sequence[Seq], temperature: float) -> torch.Tensor:
        """log pi(response_t | prompt, response_<t) for every response token, flattened in order, fp32."""
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
            keep[b, len(s.prompt) - 1 : n - 1] = True
            targets.extend(s.response)
        keep = keep.to(self.device)

        # Only response positions reach the output layer (a [B, L, V] logits tensor of a 150k-token
        # vocabulary would dwarf the model). A pre-hook on the output layer picks them, rather than a
        # boolean logits_to_keep, which only recent transformers releases accept; the head still runs
        # inside the model's forward, as FSDP needs. h[keep] flattens row-major: sequence order.
        def responses_only(_module: torch.nn.Module, args: tuple) -> tuple:
            return (args[0][keep],) + tuple(args[1:])

        hook = self._causal_lm().get_output_embeddings().register_forward_pre_hook(responses_only)
        try:
            with self._autocast():
                out = self.model(input_ids=ids.to(self.device), attention_mask=attention.to(self.device), logits_to_keep=0, use_cache=False)
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
            if all(len(seqs[i].response) == 0 for i in group) and self.dist.world == 1:
                for i in group:
                    result[i] = []
                continue
            flat = self.response_logprobs([seqs[i] for i in group], temperature).cpu().tolist()
            at = 0
            for i in group:
                n = len(seqs[i].response)
                result[i] = flat[at : at + n]
                at += n
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
    ) -> list[dict[str, Any]]:
        self.model.eval()
        if stop_strings and self.tokenizer is None:
            raise RequestError("generate: stop strings need tokenizer.json in the model directory")
        mine = self.dist.shard(len(prompts))
        local = [prompts[i] for i in mine] or [[self.spec.pad_token]]  # an idle rank still runs every step
        tries = [TokenTrie(allowed[i]) if allowed and allowed[i] else None for i in mine] or [None]
        rows = self._generate_local(local, max_tokens, temperature, top_p, seed + 1_000_003 * self.dist.rank, end_tokens, stop_strings, tries)
        result = dict(zip(mine, rows))
        merged: dict[int, dict[str, Any]] = {}
        for part in self.dist.gather(result):
            merged.update(part)
        return [merged[i] for i in range(len(prompts))]

    def _generate_local(self, prompts, max_tokens, temperature, top_p, seed, end_tokens, stop_strings, tries):
        B = len(prompts)
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), self.spec.pad_token, dtype=torch.long)
        attention = torch.zeros((B, L), dtype=torch.long)
        positions = torch.zeros((B, L), dtype=torch.long)
        for b, p in enumerate(prompts):
            offset = L - len(p)  # left padding: every row's next token is in the last column
            ids[b, offset:] = torch.tensor(p, dtype=torch.long)
            attention[b, offset:] = 1
            positions[b, offset:] = torch.arange(len(p))
        generator = torch.Generator(device="cpu").manual_seed(seed)
        rows = [{"tokens": [], "logprobs": [], "finish": "length", "done": False} for _ in range(B)]
        attention = attention.to(self.device)
        with self._autocast():
            out = self.model(
                input_ids=ids.to(self.device), attention_mask=attention, position_ids=positions.to(self.device), use_cache=True, logits_to_keep=1
            )
        past = out.past_key_values
        logits = out.logits[:, -1, :].float()
        for step in range(max_tokens):
            picks = self._sample(logits, rows, tries, temperature, top_p, generator)
            for b, (token, logprob) in enumerate(picks):
                row = rows[b]
                if row["done"]:
                    continue
                row["tokens"].append(token)
                row["logprobs"].append(logprob)
                if token in end_tokens:
                    row["done"], row["finish"] = True, "stop"
                elif stop_strings:
                    text = self.tokenizer.decode(row["tokens"], skip_special_tokens=False)
                    if any(s in text for s in stop_strings):
                        row["done"], row["finish"] = True, "stop"
            local_alive = 0 if all(r["done"] for r in rows) else 1
            if self.dist.max_int(local_alive, self.device) == 0 or step == max_tokens - 1:
                break
            last = torch.tensor([[r["tokens"][-1] if r["tokens"] else self.spec.pad_token] for r in rows], dtype=torch.long)
            attention = torch.cat([attention, torch.ones((B, 1), dtype=attention.dtype, device=self.device)], dim=1)
            pos = torch.tensor([[len(p) + step] for p in prompts], dtype=torch.long)
            with self._autocast():
                out = self.model(
                    input_ids=last.to(self.device), attention_mask=attention, position_ids=pos.to(self.device), past_key_values=past, use_cache=True
                )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
        return [{"tokens": r["tokens"], "logprobs": r["logprobs"], "finish": r["finish"]} for r in rows]

    def _sample(self, logits, rows, tries, temperature, top_p, generator) -> list[tuple[int, float]]:
        """Token choice as src/policy/sampling.ts: the log-prob is the unconstrained one at the temperature."""
        scale = 1.0 / temperature if temperature > 0 else 1.0
        scaled = logits.double().cpu() * scale
        logp_all = torch.log_softmax(scaled, dim=-1)
        B, V = scaled.shape
        allowed_mask = torch.ones((B, V), dtype=torch.bool)
        for b, trie in enumerate(tries):
            if trie is None or rows[b]["done"]:
                continue
            allowed = trie.allowed_after(rows[b]["tokens"])
            if allowed:  # an empty set (prefix left the trie) means unconstrained, as in sampling.ts
                allowed_mask[b] = False
                allowed_mask[b, [t for t in allowed if 0 <= t < V]] = True
        if temperature <= 0:
            choice = torch.where(allowed_mask, scaled, torch.tensor(-math.inf, dtype=scaled.dtype)).argmax(dim=-1)
        else:
            probs = torch.softmax(torch.where(allowed_mask, scaled, torch.tensor(-math.inf, dtype=scaled.dtype)), dim=-1)
            if top_p < 1:
                # Keep the smallest set of most likely tokens whose mass reaches top_p (ties by lower id).
                sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
                before = torch.cumsum(sorted_p, dim=-1) - sorted_p
                keep_sorted = before < top_p
                keep_sorted[:, 0] = True
                keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
                probs = torch.where(keep, probs, torch.zeros_like(probs))
            choice = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return [(int(choice[b]), float(logp_all[b, choice[b]])) for b in range(B)]

    # ------------------------------------------------------------------ training

    def train_step(self, seqs: list[Seq], cfg: ObjectiveConfig, temperature: float, lr: Optional[float]) -> dict[str, float]:
        self.model.train()  # LoRA dropout and gradient checkpointing act only in training mode
        self.optimizer.zero_grad(set_to_none=True)
        try:
            mine = self.dist.shard(len(seqs))
            groups = [g for g in self.micro_batches(seqs, mine) if any(len(seqs[i].response) > 0 for i in g)]
            rounds = self.dist.max_int(len(groups), self.device)
            stats = torch.zeros(5, dtype=torch.float64, device=self.device)
            # FSDP averages gradients over ranks; scaling by the world size turns that into the sum.
            loss_scale = float(self.dist.world)
            for r in range(rounds):
                if r >= len(groups):
                    logp = self.response_logprobs([Seq([self.spec.pad_token], [self.spec.pad_token])], 1.0)
                    (logp.sum() * 0.0).backward()  # keeps FSDP's collectives in step; contributes nothing
                    continue
                group = [seqs[i] for i in groups[r]]
                logp = self.response_logprobs(group, temperature)
                flat = lambda pick: torch.tensor([x for s in group for x in pick(s)], dtype=torch.float32, device=self.device)
                terms = objective_terms(
                    logp,
                    flat(lambda s: s.old_logprobs),
                    flat(lambda s: s.advantages),
                    flat(lambda s: s.mask),
                    flat(lambda s: s.ref_logprobs if s.ref_logprobs is not None else s.old_logprobs) if cfg.kl_coef > 0 else None,
                    cfg,
                    flat(lambda s: [1.0 if s.low_prob_mask else 0.0] * len(s.response)) if cfg.low_prob_delta is not None else None,
                )
                (terms.loss_sum * loss_scale).backward()
                stats += torch.stack([terms.loss_sum, terms.tokens, terms.clipped, terms.ratio_sum, terms.kl_sum]).detach().double()
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
            }
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.model.eval()

    # ------------------------------------------------------------------ saving

    def save(self, out_dir: str, merged: bool, with_optimizer: bool) -> dict[str, Any]:
        """Writes a Hugging Face model directory (or a PEFT adapter); only rank 0 touches the disk."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

        if merged and self.lora and self.dist.world > 1:
            raise RequestError("save: merged LoRA saving is not supported under FSDP; save the adapter (merged: false) and merge offline with PEFT")
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=full) if self.dist.world > 1 else None
        optim_state = None
        if with_optimizer:
            optim_state = get_optimizer_state_dict(self.model, self.optimizer, options=full) if self.dist.world > 1 else self.optimizer.state_dict()
        written: list[str] = []
        if self.dist.rank == 0:
            os.makedirs(out_dir, exist_ok=True)
            if self.lora and not merged:
                self.model.save_pretrained(out_dir, state_dict=state)
            elif self.lora:
                import copy

                # Merging changes the weights in place; merge a copy so training can go on with adapters.
                plain = copy.deepcopy(self.model).merge_and_unload()
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
