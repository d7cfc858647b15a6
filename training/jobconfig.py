"""What a job's config holds besides its settings, and how people see it: the periodic human-evaluation
schedule's check, YAML for the launch review, the CLI's --set pairs. Pure Python, no Django.

The settings themselves (presets, overrides, types, ranges, the checks between them) are `training.hparams`.
"""
from __future__ import annotations

from typing import Any

HUMAN_EVAL_AGAINST = ("previous", "base")


def check_human_eval(block: Any) -> str | None:
    """What is wrong with a periodic human-evaluation schedule, or None. Shape: {"every": N >= 1,
    "against": "previous" | "base", "items": 1..200, "dataset_version": id | None, "split": "val" | "train",
    "reward_rise": >= 0, "max_response_length": 1..4096}."""
    if not isinstance(block, dict):
        return "it must be an object"
    unknown = sorted(set(block) - {"every", "against", "items", "dataset_version", "split", "reward_rise",
                                   "max_response_length"})
    if unknown:
        return f"unknown keys {', '.join(unknown)}"
    for key, lo, hi in (("every", 1, 10_000), ("items", 1, 200), ("max_response_length", 1, 4096)):
        value = block.get(key)
        if value is None and key != "every":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            return f"{key} must be a whole number from {lo} to {hi}"
    if block.get("against", "previous") not in HUMAN_EVAL_AGAINST:
        return "against must be 'previous' or 'base'"
    if block.get("split", "val") not in ("val", "train"):
        return "split must be 'val' or 'train'"
    rise = block.get("reward_rise", 0.1)
    if isinstance(rise, bool) or not isinstance(rise, (int, float)) or not rise >= 0:
        return "reward_rise must be a number of at least 0"
    version = block.get("dataset_version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        return "dataset_version must be a dataset version id"
    return None


def to_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def parse_set_args(items: list[str] | None) -> dict[str, str]:
    """CLI `--set key=value` pairs -> {key: value}; ValueError names the bad item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value
    return out
