"""The rollout store: every training step's samples, one `samples/rollout/<step>.jsonl` per step.

Rows are VERL's `rollout_data_dir` format (`{"input", "output", "gts", "score", "step", <reward extra
keys>...}`) plus the keys the run page, the sample browser and re-scoring read:

- "uid": the group (the same prompt within the step), "sample_index": 0..n-1 within the group;
- "components": {component: score, or null when it failed}, "errors": {component: message};
- "extras": {component: {key: value}} the other keys of a reward that returned a dict;
- "reward_logs": {component: text} what a component's reward code printed for the sample (capped);
- "advantage": the GRPO advantage the sample got, "response_length" (tokens), "truncated" (bool);
- optionally "tokens" (decoded response tokens) and, one number per token, "token_logratio" (policy minus
  reference log-prob), "token_entropy" (the policy's entropy) and "token_logprob_diff" (the training pass's
  log-prob minus the one the rollout sampled the token with).

The local trainer writes them all. VERL's dumps carry what our reward wrapper returned
(`training.backends.verl_reward`: "r/<component>", "err/<component>", "log/<component>", user extras);
`normalize` fills
in the rest where it can be derived (groups from the prompt text, advantages with GRPO's maths) and
leaves the rest null. `component_metrics` turns one step's rows into the per-component series, so
both backends log the same names. Retention (`plan_retention`, `prune`) keeps the store bounded.

Pure standard library, like `training.ingest`, so the web app can call it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from training.rundir import RunDir, write_jsonl

KIND = "rollout"
# The optimised total: the mean of the scores that went into the GRPO advantage, on both backends
# (VERL's compute_data_metrics logs it; the local trainer logs the same value under the same name).
TOTAL_METRIC = "critic/rewards/mean"
SCORE_KEY, ERROR_KEY, LOG_KEY = "r/", "err/", "log/"  # VERL dump columns written by training.backends.verl_reward
VERL_KEYS = {"input", "output", "gts", "score", "step", "acc", "reward_error", "reference_score", "win",
             "request_id", "data_source", "extra_info"}
STORE_KEYS = {"uid", "sample_index", "components", "errors", "extras", "reward_logs", "advantage", "response_length",
              "truncated", "tokens", "token_logratio", "token_entropy", "token_logprob_diff", "prompt_length"}
TOKEN_KEYS = ("tokens", "token_logratio", "token_entropy", "token_logprob_diff")
EPSILON = 1e-6  # VERL's compute_grpo_outcome_advantage


def metric(component: str, stat: str) -> str:
    """`reward/<component>/<stat>`: the series name of one component's statistic."""
    return f"reward/{component}/{stat}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# -- metrics ---------------------------------------------------------------------------------

def component_metrics(rows: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    """One step's per-component series: `reward/<c>/mean` (over the samples it scored),
    `reward/<c>/error_share` (share of samples where it raised or gave no number) and
    `reward/<c>/<key>/mean` for each number a reward returning a dict gave besides its score."""
    scores: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    failed: dict[str, int] = {}
    extras: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        errors = row.get("errors") or {}
        for name, value in (row.get("components") or {}).items():
            counts[name] = counts.get(name, 0) + 1
            number = _number(value)
            if number is None or name in errors:
                failed[name] = failed.get(name, 0) + 1
            else:
                scores.setdefault(name, []).append(number)
        for name, values in (row.get("extras") or {}).items():
            for key, value in (values or {}).items() if isinstance(values, dict) else ():
                number = _number(value)
                if number is not None:
                    extras.setdefault((name, str(key)), []).append(number)
    out: dict[str, float | None] = {}
    for name, n in counts.items():
        out[metric(name, "mean")] = _mean(scores.get(name, []))
        out[metric(name, "error_share")] = failed.get(name, 0) / n
    for (name, key), values in extras.items():
        out[metric(name, f"{key}/mean")] = _mean(values)
    return out


def grpo_advantages(scores: Sequence[float | None], groups: Sequence[Any], epsilon: float = EPSILON) -> list[float]:
    """GRPO's outcome advantage per sample, as VERL's `compute_grpo_outcome_advantage` computes it:
    (score - group mean) / (group std + epsilon), the std unbiased; a group of one has mean 0, std 1."""
    members: dict[Any, list[float]] = {}
    values = [_number(s) or 0.0 for s in scores]
    for value, group in zip(values, groups, strict=True):
        members.setdefault(group, []).append(value)
    stats = {}
    for group, vals in members.items():
        if len(vals) == 1:
            stats[group] = (0.0, 1.0)
        else:
            mean = sum(vals) / len(vals)
            stats[group] = (mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)))
    return [(v - stats[g][0]) / (stats[g][1] + epsilon) for v, g in zip(values, groups, strict=True)]


# -- rows ------------------------------------------------------------------------------------

def _split_verl_columns(row: dict[str, Any]) -> tuple[dict, dict, dict]:
    """Components, errors and extras from a VERL dump row's reward columns."""
    components = {k[len(SCORE_KEY):]: _number(v) for k, v in row.items() if k.startswith(SCORE_KEY)}
    errors = {k[len(ERROR_KEY):]: "raised or gave no number (see the run's log)" for k, v in row.items()
              if k.startswith(ERROR_KEY) and _number(v)}
    for name in errors:
        components[name] = None
    extras: dict[str, dict[str, Any]] = {}
    for key, value in row.items():
        if key in VERL_KEYS or key in STORE_KEYS or key.startswith((SCORE_KEY, ERROR_KEY, LOG_KEY)):
            continue
        if not isinstance(value, (int, float, str, bool)) and value is not None:
            continue
        comp, sep, sub = key.partition("/")
        if sep and comp in components:
            extras.setdefault(comp, {})[sub] = value
        elif not sep and len(components) == 1:  # one component: its extras are not prefixed
            extras.setdefault(next(iter(components)), {})[key] = value
    return components, errors, extras


def normalize(rows: list[dict[str, Any]], step: int | None = None) -> list[dict[str, Any]]:
    """Rows of one step with every store key present: the ones a row lacks are derived where they can be
    (groups from the prompt text, in order of first appearance; advantages by GRPO's maths over the rows'
    scores), else null. Rows that already have a key keep it."""
    out = []
    group_of: dict[str, str] = {}
    seen: dict[str, int] = {}
    for row in rows:
        row = dict(row)
        if row.get("step") is None and step is not None:
            row["step"] = step
        if row.get("uid") is None:
            text = str(row.get("input"))
            row["uid"] = group_of.setdefault(text, f"{row.get('step', step)}:{len(group_of)}")
        uid = str(row["uid"])
        if row.get("sample_index") is None:
            row["sample_index"] = seen.get(uid, 0)
        seen[uid] = seen.get(uid, 0) + 1
        if "components" not in row:  # a VERL dump's row
            row["components"], row["errors"], row["extras"] = _split_verl_columns(row)
            row["reward_logs"] = {k[len(LOG_KEY):]: v for k, v in row.items()
                                  if k.startswith(LOG_KEY) and isinstance(v, str) and v}
        row.setdefault("errors", {})
        row.setdefault("extras", {})
        for key in ("response_length", "truncated", "advantage"):
            row.setdefault(key, None)
        out.append(row)
    missing = [i for i, r in enumerate(out) if r["advantage"] is None]
    if missing:
        adv = grpo_advantages([r.get("score") for r in out], [str(r["uid"]) for r in out])
        for i in missing:
            out[i]["advantage"] = adv[i]
    return out


def summary_path(run_dir: str | Path, step: int) -> Path:
    """`samples/rollout/<step>.summary.json`: the metrics of one step's dump, written by the trainer beside it
    (training.ingest.write_rollout_summary), so the web app's sync need not read the dump."""
    return RunDir(run_dir).samples_dir(KIND) / f"{int(step)}.summary.json"


def write_step(run_dir: str | Path, step: int, rows: list[dict[str, Any]]) -> Path:
    """Write one step's rows (atomically: a reader never sees half a file)."""
    return write_jsonl(RunDir(run_dir).samples(KIND, step), rows)


def steps(run_dir: str | Path) -> list[int]:
    root = RunDir(run_dir).samples_dir(KIND)
    if not root.is_dir():
        return []
    return sorted(int(p.stem) for p in root.glob("*.jsonl") if p.stem.isdigit())


# -- retention -------------------------------------------------------------------------------

def plan_retention(sizes: dict[int, int], keep_last: int | None, keep_every: int | None,
                   max_mb: float | None) -> list[int]:
    """Steps whose dumps go: all but the last `keep_last` (None = keep all) and, of the older ones, every
    `keep_every`-th step; then the oldest of those kept while they add up to more than `max_mb` (the
    newest dump always stays)."""
    ordered = sorted(sizes)
    if keep_last is None:
        keep = set(ordered)
    else:
        keep = set(ordered[-keep_last:]) if keep_last > 0 else set()
        if keep_every:
            keep |= {s for s in ordered if s % keep_every == 0}
    if max_mb is not None:
        budget = max_mb * 1024 * 1024
        total = sum(sizes[s] for s in keep)
        for s in sorted(keep):
            if total <= budget or s == ordered[-1]:
                break
            keep.discard(s)
            total -= sizes[s]
    return [s for s in ordered if s not in keep]


def prune(run_dir: str | Path, keep_last: int | None, keep_every: int | None, max_mb: float | None) -> list[int]:
    """Delete the dumps `plan_retention` lets go; returns their steps."""
    root = RunDir(run_dir).samples_dir(KIND)
    sizes = {}
    for step in steps(run_dir):
        try:
            sizes[step] = (root / f"{step}.jsonl").stat().st_size
        except FileNotFoundError:
            continue
    doomed = plan_retention(sizes, keep_last, keep_every, max_mb)
    for step in doomed:
        (root / f"{step}.jsonl").unlink(missing_ok=True)
        summary_path(run_dir, step).unlink(missing_ok=True)
    return doomed
