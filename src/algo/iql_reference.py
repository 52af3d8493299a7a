"""Reference IQL losses for src/algo/iql.test.ts, in PyTorch, written as the IQL code Retrospex builds on.

Usage: python iql_reference.py IN_JSON OUT_JSON
IN_JSON: {"tau", "discount", "alpha", "u", "rewards", "done", "next_v", "q1", "q2", "target", "online"}.
OUT_JSON: {"expectile_loss", "td_targets", "q_loss", "polyak"}, computed as
  asymmetric_l2_loss (Yufei-Xiang/Retrospex IQL/src/iql.py): mean(|tau - 1(u < 0)| * u**2)
  targets = rewards + (1 - done) * discount * next_v
  q_loss = sum(F.mse_loss(q, targets) for q in (q1, q2)) / 2   (gwthomas/IQL-PyTorch, twin heads)
  update_exponential_moving_average (IQL/src/util.py): target * (1 - alpha) + alpha * online
"""
import json
import sys

import torch
import torch.nn.functional as F


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: iql_reference.py IN_JSON OUT_JSON")
    with open(sys.argv[1], encoding="utf-8") as f:
        d = json.load(f)
    t = lambda k: torch.tensor(d[k], dtype=torch.float64)
    u = t("u")
    expectile = torch.mean(torch.abs(d["tau"] - (u < 0).double()) * u**2)
    targets = t("rewards") + (1.0 - t("done")) * d["discount"] * t("next_v")
    q_loss = sum(F.mse_loss(q, targets) for q in (t("q1"), t("q2"))) / 2
    target = t("target").clone()
    target.mul_(1.0 - d["alpha"]).add_(t("online"), alpha=d["alpha"])
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(
            {
                "expectile_loss": expectile.item(),
                "td_targets": targets.tolist(),
                "q_loss": q_loss.item(),
                "polyak": target.tolist(),
            },
            f,
        )


if __name__ == "__main__":
    main()
