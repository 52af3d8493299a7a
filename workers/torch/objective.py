"""
The clipped policy objective of EMPO² as a loss to minimise, term for term the same as
src/algo/objective.ts (that file is the reference; keep the two in step):

    L = - mean_tokens[ min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A) * m ] + beta * KL_k3(pi_theta || pi_ref)

Sums are returned rather than means so that gradients accumulated over micro-batches (and over
ranks) are exact; the caller divides once by the token count of the whole batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class ObjectiveConfig:
    clip_low: float
    clip_high: float
    dual_clip: Optional[float]
    kl_coef: float
    low_prob_delta: Optional[float]


@dataclass
class ObjectiveTerms:
    loss_sum: torch.Tensor  # carries the gradient
    tokens: torch.Tensor
    clipped: torch.Tensor
    ratio_sum: torch.Tensor
    kl_sum: torch.Tensor


def objective_terms(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: Optional[torch.Tensor],
    cfg: ObjectiveConfig,
    low_prob_scope: Optional[torch.Tensor] = None,
) -> ObjectiveTerms:
    """`low_prob_scope`: 1 where the delta mask applies, 0 where it does not (EMPO2 masks only
    off-policy tokens); None: everywhere."""
    if cfg.low_prob_delta is not None:
        # A comparison carries no gradient, so the mask itself is never trained.
        keep = (logp >= math.log(cfg.low_prob_delta)).to(logp.dtype)
        if low_prob_scope is not None:
            keep = torch.maximum(keep, (low_prob_scope == 0).to(logp.dtype))
        mask = mask * keep
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped_ratio = torch.clamp(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high)
    objective = torch.minimum(unclipped, clipped_ratio * advantages)
    if cfg.dual_clip is not None:
        lower_bound = advantages * cfg.dual_clip
        objective = torch.where(advantages < 0, torch.maximum(objective, lower_bound), objective)
    per_token = -objective
    kl_sum = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if cfg.kl_coef > 0:
        if ref_logp is None:
            raise ValueError("objective: kl_coef > 0 needs reference log-probs")
        diff = ref_logp - logp
        kl = torch.exp(diff) - diff - 1  # k3 estimator of KL(pi_theta || pi_ref)
        per_token = per_token + cfg.kl_coef * kl
        kl_sum = (kl * mask).sum()
    was_clipped = ((ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)).to(logp.dtype)
    return ObjectiveTerms(
        loss_sum=(per_token * mask).sum(),
        tokens=mask.sum(),
        clipped=(was_clipped * mask).sum(),
        ratio_sum=(ratio * mask).sum(),
        kl_sum=kl_sum,
    )
