"""The reward-function sandbox: untrusted `compute_score` code runs only in a sandboxed child process.

    from training.sandbox import RewardSandbox, SandboxLimits, check_source, isolation_info

    with RewardSandbox(source, name="compute_score", limits=SandboxLimits(), hidden_paths=[...]) as sb:
        results = sb.score_batch(items)   # a ScoreBatch: a sequence of ScoreResult; .scores is the floats

    with SandboxPool(source, size=pool_size(reward_workers)) as pool:   # the same, over several sandboxes
        results = pool.score_batch(items)

Without a working bubblewrap nothing runs: `start` raises SandboxUnavailable (fail closed; see isolation.py
for the operator's opt-in). `python -m training.sandbox` says which isolation this host gives.

Pure Python; never imports Django.
"""
from __future__ import annotations

from training.sandbox.check import Problem, check_source
from training.sandbox.isolation import isolation_info
from training.sandbox.pool import SandboxPool, pool_size
from training.sandbox.runner import RewardSandbox
from training.sandbox.types import (
                                    RewardLoadError,
                                    SandboxError,
                                    SandboxLimits,
                                    SandboxUnavailable,
                                    ScoreBatch,
                                    ScoreResult,
)

__all__ = [
    "Problem",
    "RewardLoadError",
    "RewardSandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxPool",
    "SandboxUnavailable",
    "ScoreBatch",
    "ScoreResult",
    "check_source",
    "isolation_info",
    "pool_size",
]
