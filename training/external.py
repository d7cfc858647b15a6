"""Runs the app did not launch: find what a VERL or TRL output folder holds, and turn TRL's logs into the
run directory's formats.

VERL, launched by hand, leaves its file logger's JSONL (`{"step", "data"}` lines: VERL_FILE_LOGGER_PATH, or
`<VERL_FILE_LOGGER_ROOT>/<project>/<experiment>.jsonl`), `global_step_N/` checkpoints under
`trainer.default_local_dir` (with `latest_checkpointed_iteration.txt`), rollout and validation dumps
(`trainer.rollout_data_dir` / `validation_data_dir`: `<step>.jsonl`) and Hydra's `.hydra/config.yaml`.
TRL's GRPOTrainer with `log_completions=True` writes `<output_dir>/completions/completions_<step:05d>.parquet`
(columns step, prompt, completion, one per reward function, the logged extras, advantage) and each
`checkpoint-N/trainer_state.json` holds the logged metrics (`log_history`).

Standard library (plus pyarrow for TRL's tables, read lazily): the web app calls it to attach a folder.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training.checkpoints import STEP_DIR
from training.ingest import parse_metrics_line

MAX_DEPTH = 3
MAX_ENTRIES = 5000  # a folder walk stops looking after this many entries
TRL_TABLE = re.compile(r"^completions_(\d+)\.parquet$")
TRL_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# TRL's logged names -> the names both backends here log (the run page's charts and guard rules read these).
TRL_METRICS = {"reward": "critic/score/mean", "reward_std": "critic/score/std", "kl": "actor/kl_loss",
               "entropy": "actor/entropy", "completions/mean_length": "response_length/mean",
               "completions/max_length": "response_length/max", "completions/min_length": "response_length/min",
               "completions/clipped_ratio": "response_length/clip_ratio", "grad_norm": "actor/grad_norm",
               "learning_rate": "actor/lr", "loss": "actor/pg_loss", "frac_reward_zero_std":
               "critic/zero_variance_group_share"}


class LayoutError(ValueError):
    """A folder that holds no run the app can follow; the message says what was looked for."""


@dataclass
class Layout:
    """What an external run folder holds, as paths relative to it ("" when absent)."""

    format: str  # "verl" | "trl"
    metrics: str = ""  # VERL's file-logger JSONL
    checkpoints: str = ""  # the folder of global_step_N/ (VERL)
    rollout: str = ""  # the folder of <step>.jsonl rollout dumps (VERL)
    val: str = ""  # the folder of <step>.jsonl validation dumps (VERL)
    hydra: str = ""  # Hydra's composed config.yaml (VERL)
    completions: str = ""  # the folder of completions_<step>.parquet (TRL)
    found: list[str] = field(default_factory=list)  # what it found, in words

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _walk(root: Path):
    """(folder, sub-folders, files) down to MAX_DEPTH, hidden folders skipped except .hydra, links not followed."""
    seen = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if (not d.startswith(".") or d == ".hydra") and depth < MAX_DEPTH
                         and not STEP_DIR.match(d) and not TRL_CHECKPOINT.match(d))
        seen += len(dirs) + len(files)
        if seen > MAX_ENTRIES:
            return
        yield Path(folder), dirs, sorted(files)


def _first_line(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.readline(1 << 20)
    except OSError:
        return b""


def _is_metrics(path: Path) -> bool:
    return parse_metrics_line(_first_line(path)) is not None


def _is_dump(path: Path) -> bool:
    try:
        row = json.loads(_first_line(path))
    except ValueError:
        return False
    return isinstance(row, dict) and "input" in row and "output" in row


def _inside(path: Path, root: Path) -> bool:
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return False
    return resolved == root or root in resolved.parents


def detect(root: str | Path) -> Layout:
    """What `root` holds: a VERL run (metrics, checkpoints, dumps, Hydra config) or a TRL output folder.

    Symlinks leading out of `root` are ignored: a followed run is read only from inside its folder."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise LayoutError(f"{root} is not a folder.")
    verl, trl = Layout("verl"), Layout("trl")
    trl_states = []
    for folder, _dirs, files in _walk(root):
        rel = str(folder.relative_to(root)) if folder != root else ""
        names = set(files)
        if any(TRL_TABLE.match(f) for f in files) and not trl.completions:
            trl.completions = rel or "."
        if any(TRL_CHECKPOINT.match(d) for d in os.listdir(folder) if (folder / d / "trainer_state.json").is_file()):
            trl_states.append(rel or ".")
        step_dirs = [d for d in os.listdir(folder) if STEP_DIR.match(d) and (folder / d).is_dir()]
        if (step_dirs or "latest_checkpointed_iteration.txt" in names) and not verl.checkpoints:
            verl.checkpoints = rel or "."
        if folder.name == ".hydra" and "config.yaml" in names and not verl.hydra:
            verl.hydra = str(Path(rel) / "config.yaml")
        dumps = [f for f in files if f.endswith(".jsonl") and f[:-6].isdigit()]
        if dumps and _inside(folder / dumps[0], root) and _is_dump(folder / dumps[0]):
            kind = "val" if re.search(r"val|test|eval", folder.name, re.I) else "rollout"
            if not getattr(verl, kind):
                setattr(verl, kind, rel or ".")
            continue
        for f in files:
            path = folder / f
            if f.endswith(".jsonl") and not verl.metrics and _inside(path, root) and _is_metrics(path):
                verl.metrics = str(Path(rel) / f) if rel else f
    if trl.completions:
        trl.found = [f"TRL completion tables in {trl.completions}/"] + \
                    [f"trainer_state.json of checkpoints in {s}/" for s in trl_states[:1]]
        trl.checkpoints = trl_states[0] if trl_states else ""
        return trl
    if not (verl.metrics or verl.rollout or verl.checkpoints):
        raise LayoutError(f"{root} holds no VERL file-logger JSONL ({{\"step\", \"data\"}} lines), no global_step_N "
                          "checkpoints, no <step>.jsonl rollout dumps and no TRL completions_<step>.parquet tables.")
    verl.found = [what for what, ok in (
        (f"metrics in {verl.metrics}", verl.metrics), (f"checkpoints in {verl.checkpoints}/", verl.checkpoints),
        (f"rollout dumps in {verl.rollout}/", verl.rollout), (f"validation dumps in {verl.val}/", verl.val),
        (f"Hydra config {verl.hydra}", verl.hydra)) if ok]
    return verl


# -- TRL ----------------------------------------------------------------------------------------

def trl_steps(folder: str | Path) -> dict[int, Path]:
    """{step: table} of a TRL completions folder."""
    out = {}
    for p in Path(folder).glob("completions_*.parquet"):
        m = TRL_TABLE.match(p.name)
        if m:
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def _text(value: Any) -> str:
    """A TRL prompt or completion: a string, or a conversation (list of {"role", "content"}) as its text."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" if isinstance(m, dict) else str(m)
                         for m in value)
    return "" if value is None else str(value)


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def trl_rows(table: str | Path, step: int) -> list[dict[str, Any]]:
    """One TRL completions table as rollout-store rows: groups by prompt, each reward function a component,
    the score their sum (TRL's default weights of 1), TRL's own advantage."""
    import pyarrow.parquet as pq

    data = pq.read_table(table).to_pylist()
    fixed = {"step", "prompt", "completion", "advantage", "image"}
    rows, group_of, seen = [], {}, {}
    reward_cols = [c for c in (data[0] if data else {}) if c not in fixed]
    for rec in data:
        prompt = _text(rec.get("prompt"))
        uid = group_of.setdefault(prompt, f"{step}:{len(group_of)}")
        components = {c: _num(rec.get(c)) for c in reward_cols if _num(rec.get(c)) is not None or rec.get(c) is None}
        scores = [v for v in components.values() if v is not None]
        rows.append({"input": prompt, "output": _text(rec.get("completion")), "gts": None,
                     "score": sum(scores) if scores else None, "step": step, "uid": uid,
                     "sample_index": seen.get(uid, 0), "components": components,
                     "errors": {c: "no number (None in TRL's table)" for c, v in components.items() if v is None},
                     "extras": {}, "advantage": _num(rec.get("advantage")), "response_length": None,
                     "truncated": None})
        seen[uid] = seen.get(uid, 0) + 1
    return rows


def trl_metrics(output_dir: str | Path, checkpoints: str) -> dict[int, dict[str, float | None]]:
    """The newest trainer_state.json's log_history by step, under both TRL's and this app's names."""
    folder = Path(output_dir) / checkpoints
    states = sorted((int(m.group(1)), p / "trainer_state.json") for p in folder.glob("checkpoint-*")
                     if (m := TRL_CHECKPOINT.match(p.name)) and (p / "trainer_state.json").is_file())
    if not states:
        return {}
    try:
        history = json.loads(states[-1][1].read_text()).get("log_history") or []
    except (OSError, ValueError):
        return {}
    out: dict[int, dict[str, float | None]] = {}
    for entry in history:
        step = entry.get("step") if isinstance(entry, dict) else None
        if not isinstance(step, int):
            continue
        data = out.setdefault(step, {})
        for key, value in entry.items():
            if key in ("step", "epoch") or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            data[f"trl/{key}"] = _num(value)
            if key in TRL_METRICS:
                data[TRL_METRICS[key]] = _num(value)
    return out
