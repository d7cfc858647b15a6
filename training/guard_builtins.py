"""The built-in run-health rules: their declarations, sensible thresholds and where each backend logs their metric.

`training.guard_rules` is the engine that runs them; this is their table (and the metrics only a rule needs).
Standard library only.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from training.garbled import GARBLED_SHARE

KL_RULE = "kl"
TIED_SHARE = "critic/zero_variance_group_share"
TIED_TOL = 1e-6


def tied_group_share(groups: Iterable[Sequence[Any]], tol: float = TIED_TOL) -> float | None:
    """The share of prompts whose samples all got the same reward: their GRPO advantages, loss and
    gradient are exactly 0, so the step learns nothing from them. Each group holds one prompt's
    sample rewards; groups with fewer than two usable rewards are not counted (None if none is)."""
    counted = tied = 0
    for group in groups:
        vals = [float(v) for v in group
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        if len(vals) < 2:
            continue
        counted += 1
        tied += (max(vals) - min(vals)) <= tol
    return tied / counted if counted else None


# The built-in rules. "kl" is the KL guard: the GPU presets turn it on with these defaults (KL above 0.1
# for 3 logged steps restores the last good checkpoint with lr × 0.5). Both backends log these names: the
# local trainer mirrors VERL's metric names; for VERL the tied-group share is computed at ingest from its
# rollout dumps (see METRIC_SOURCES).
BUILTIN: dict[str, dict[str, Any]] = {
    "kl": {"metric": "actor/kl_loss", "condition": "above", "threshold": 0.1, "patience": 3, "action": "restore"},
    "entropy_collapse": {"metric": "actor/entropy", "condition": "drop", "threshold": 0.6, "warmup": 10,
                         "patience": 3, "action": "warn"},
    "zero_variance_groups": {"metric": TIED_SHARE, "condition": "above",
                             "threshold": 0.9, "warmup": 5, "patience": 5, "action": "warn"},
    "response_length_collapse": {"metric": "response_length/mean", "condition": "drop", "threshold": 0.6,
                                 "warmup": 10, "patience": 3, "action": "warn"},
    "response_clipping": {"metric": "response_length/clip_ratio", "condition": "above", "threshold": 0.5,
                          "warmup": 5, "patience": 3, "action": "warn"},
    "grad_norm_spike": {"metric": "actor/grad_norm", "condition": "spike", "threshold": 6.0, "window": 20,
                        "patience": 1, "action": "warn"},
    "reward_hacking": {"metric": "critic/score/mean", "versus": "val-core/*/win_rate", "condition": "diverge",
                       "threshold": 0.05, "window": 3, "patience": 1, "action": "warn"},
    # Spikes at random steps (a z-score over the last `window` values); "restore" with new_seed goes back to the
    # last good checkpoint and draws other rollouts, for a spike that bad luck caused.
    "kl_spike": {"metric": "actor/kl_loss", "condition": "spike", "threshold": 6.0, "window": 20, "patience": 1,
                 "action": "warn"},
    "ratio_spike": {"metric": "actor/ppo_kl", "condition": "spike", "threshold": 6.0, "window": 20, "patience": 1,
                    "action": "warn"},
    # Responses that loop, carry broken encoding or switch script (training.garbled).
    "garbled_output": {"metric": GARBLED_SHARE, "condition": "above", "threshold": 0.2, "patience": 2,
                       "action": "warn"},
}
# The thresholds that make sense for each built-in rule's metric: (low, high), low excluded.
THRESHOLD_RANGE: dict[str, tuple[float, float]] = {
    "kl": (0.0, 100.0), "entropy_collapse": (0.0, 0.999), "zero_variance_groups": (0.0, 1.0),
    "response_length_collapse": (0.0, 0.999), "response_clipping": (0.0, 1.0), "grad_norm_spike": (0.0, 1000.0),
    "reward_hacking": (0.0, 1.0), "kl_spike": (0.0, 1000.0), "ratio_spike": (0.0, 1000.0), "garbled_output": (0.0, 1.0),
}
# Where each built-in rule's metric comes from, per backend (None: that backend does not log it).
METRIC_SOURCES: dict[str, dict[str, str | None]] = {
    "kl": {"local": "actor/kl_loss", "verl": "actor/kl_loss (use_kl_loss=True)"},
    "entropy_collapse": {"local": "actor/entropy", "verl": "actor/entropy (none with verl.reuse_rollout_logprobs)"},
    "zero_variance_groups": {"local": TIED_SHARE, "verl": f"{TIED_SHARE} (from samples/rollout at ingest)"},
    "response_length_collapse": {"local": "response_length/mean", "verl": "response_length/mean"},
    "response_clipping": {"local": "response_length/clip_ratio", "verl": "response_length/clip_ratio"},
    "grad_norm_spike": {"local": "actor/grad_norm", "verl": "actor/grad_norm"},
    "reward_hacking": {"local": "critic/score/mean vs val-core/*/win_rate",
                       "verl": "critic/score/mean vs val-core/*/win_rate (with reference answers)"},
    "kl_spike": {"local": "actor/kl_loss", "verl": "actor/kl_loss (use_kl_loss=True)"},
    "ratio_spike": {"local": "actor/ppo_kl", "verl": "actor/ppo_kl"},
    "garbled_output": {"local": GARBLED_SHARE, "verl": f"{GARBLED_SHARE} (from samples/rollout at ingest)"},
}
