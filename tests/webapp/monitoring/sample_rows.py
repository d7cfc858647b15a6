"""Rollout-store rows as the contract (training.rollouts) describes them, for the sample browser's tests."""
from __future__ import annotations

import json
from pathlib import Path

PROMPTS = ["1+1=", "2+2=", "3+3="]


def rollout_row(step: int, p: int, i: int, *, output: str, score: float, fmt: float = 1.0, length: int = 2,
                truncated: bool = False, error: str | None = None, tokens: bool = True) -> dict:
    row = {"input": PROMPTS[p], "output": output, "gts": str(2 * (p + 1)), "score": score, "step": step,
           "data_source": "arith", "uid": f"{step}:{p}", "sample_index": i,
           "components": {"exact": None if error else score, "format": fmt},
           "errors": {"exact": error} if error else {}, "extras": {}, "advantage": 0.0,
           "response_length": length, "truncated": truncated}
    if tokens:
        row["tokens"] = output.split(" ") if " " in output else list(output)
        row["token_logratio"] = [0.1 * (k + 1) * (1 if k % 2 == 0 else -1) for k in range(len(row["tokens"]))]
    return row


def demo_rollouts(step: int) -> list[dict]:
    """Step `step`: prompt 0 ties (both samples right), prompt 1 differs, prompt 2 only every 20th step
    (a batch samples some prompts), one truncated sample and one reward error."""
    rows = [rollout_row(step, 0, 0, output="2", score=1.0), rollout_row(step, 0, 1, output="2", score=1.0),
            rollout_row(step, 1, 0, output=f"the answer is {step}", score=0.0, length=4),
            rollout_row(step, 1, 1, output="4", score=1.0, length=1)]
    if step % 20 == 0:
        rows += [rollout_row(step, 2, 0, output="6 6 6 6 6 6", score=0.0, length=8, truncated=True, tokens=False),
                 rollout_row(step, 2, 1, output="x", score=0.0, fmt=0.0, error="ValueError: boom")]
    for r in rows:  # GRPO advantages: (score - group mean) / std; a tied group gets 0
        group = [x["score"] for x in rows if x["uid"] == r["uid"]]
        mean = sum(group) / len(group)
        r["advantage"] = 0.0 if max(group) == min(group) else (0.7071 if r["score"] > mean else -0.7071)
    return rows


def write_rollouts(run_dir: str | Path, steps) -> None:
    folder = Path(run_dir) / "samples" / "rollout"
    folder.mkdir(parents=True, exist_ok=True)
    for step in steps:
        (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in demo_rollouts(step)))
