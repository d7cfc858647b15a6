"""Read what a training process left in its run directory: metrics, checkpoints, samples.

Shared by both backends and called by the web app; pure Python, no Django, no torch.

Metrics come from VERL's file logger (`verl/utils/tracking.py` FileLogger): one
`{"step": N, "data": {...}}` object per line, written with orjson (NaN/inf become null),
file opened with "wb" (a restart truncates it), so every attempt writes its own file.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training import rollouts
from training.checkpoints import STEP_DIR, dir_size, latest_step, read_manifest
from training.rundir import RunDir, RunDirError, read_jsonl, write_json

Metrics = dict[str, float | None]
# VERL's console logger (verl/utils/logger/aggregate_logger.py): "step:N - key:value - ...",
# possibly behind a Ray prefix such as "(TaskRunner pid=123) ".
_CONSOLE = re.compile(r"(?:^|\s|\))step:(\d+)((?: - [^\n]*)?)\s*$")
_NP_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


def _number(value: Any) -> float | None:
    """A metric value as float; null, NaN, inf and non-numbers become None."""
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return None


def parse_metrics_line(line: str | bytes) -> tuple[int, Metrics] | None:
    """Parse one file-logger line; None for a blank, torn or foreign line."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
        return None
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or step != int(step) or step < 0:
        return None
    return int(step), {str(k): _number(v) for k, v in obj["data"].items()}


def merge_into(acc: dict[int, Metrics], step: int, data: Metrics) -> None:
    """Merge one record: keys logged later replace earlier ones for the same step."""
    acc.setdefault(step, {}).update(data)


def read_metrics_file(path: str | Path) -> dict[int, Metrics]:
    """Read one metrics.jsonl, skipping torn or malformed lines."""
    out: dict[int, Metrics] = {}
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return out
    for line in raw.splitlines():
        rec = parse_metrics_line(line)
        if rec is not None:
            merge_into(out, *rec)
    return out


def read_metrics(run_dir: str | Path, console_fallback: bool = True) -> dict[int, Metrics]:
    """Merge every attempt's metrics by step; a later attempt wins for the keys it logged.

    An attempt without a usable metrics.jsonl (file logger never started, or a foreign
    trainer) falls back to the `step:N - key:value` lines in its log.txt.
    """
    merged: dict[int, Metrics] = {}
    for adir in RunDir(run_dir).attempts():
        per_attempt = read_metrics_file(adir.metrics)
        if not per_attempt and console_fallback:
            per_attempt = read_console_metrics(adir.log)
        for step in sorted(per_attempt):
            merge_into(merged, step, per_attempt[step])
    return dict(sorted(merged.items()))


class MetricsTail:
    """Incremental reader of one metrics.jsonl: `read_new()` returns records added since last call.

    Keeps a byte offset and holds back an unterminated last line until it is complete. If the
    file shrank, or its first line changed (truncated by a restart and rewritten past our
    offset), reading starts again from byte 0.
    """

    HEAD_BYTES = 256

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0
        self._head = b""
        self._ino: int | None = None

    def _restarted(self, size: int, ino: int, head: bytes) -> bool:
        if self._ino is not None and ino != self._ino:
            return True
        return size < self.offset or (self._head != b"" and not head.startswith(self._head[: len(head)]))

    def read_new(self) -> list[tuple[int, Metrics]]:
        try:
            with self.path.open("rb") as fh:
                st = os.fstat(fh.fileno())
                head = fh.read(self.HEAD_BYTES)
                if self._restarted(st.st_size, st.st_ino, head):
                    self.offset = 0
                self._ino = st.st_ino
                self._head = head
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        records = []
        for line in chunk[: end + 1].splitlines():
            rec = parse_metrics_line(line)
            if rec is not None:
                records.append(rec)
        return records


def _console_value(text: str) -> float | None:
    text = text.strip()
    m = _NP_SCALAR.match(text)  # numpy 2 reprs: np.float64(0.5)
    if m:
        text = m.group(1)
    try:
        return _number(float(text))
    except ValueError:
        return None


def parse_console_line(line: str) -> tuple[int, Metrics] | None:
    """Parse VERL's console logger line `step:N - key:value - ...`; None for other lines."""
    m = _CONSOLE.search(line.rstrip("\r\n"))
    if not m:
        return None
    data: Metrics = {}
    for part in m.group(2).split(" - ")[1:]:
        key, sep, value = part.rpartition(":")
        if sep and key:
            data[key.strip()] = _console_value(value)
    return int(m.group(1)), data


def read_console_metrics(log_path: str | Path) -> dict[int, Metrics]:
    """Metrics from a training log's console lines (fallback when no metrics.jsonl exists)."""
    out: dict[int, Metrics] = {}
    try:
        with Path(log_path).open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                rec = parse_console_line(line)
                if rec is not None and rec[1]:
                    merge_into(out, *rec)
    except FileNotFoundError:
        pass
    return out


# -- checkpoints -----------------------------------------------------------------------------

@dataclass
class CheckpointInfo:
    step: int
    path: Path
    size_bytes: int
    has_manifest: bool
    format: str  # "verl" | "local" | "unknown"
    complete: bool = True  # weights present and the save finished
    is_latest: bool = False  # named by latest_checkpointed_iteration.txt
    lora: bool | None = None
    manifest: dict[str, Any] | None = field(default=None, repr=False)


# The run directory's checkpoint primitives live in training.checkpoints (stdlib only, like this module).
latest_checkpointed_step = latest_step  # `latest_checkpointed_iteration.txt` of a checkpoints/ folder


def describe_checkpoint(path: Path, latest: int | None = None,
                        with_size: bool = True) -> CheckpointInfo | None:
    """Describe one `global_step_N` folder (VERL or local layout)."""
    m = STEP_DIR.match(path.name)
    if not m or not path.is_dir():
        return None
    step = int(m.group(1))
    manifest = read_manifest(path)
    actor = path / "actor"
    if actor.is_dir() or (manifest or {}).get("format") == "verl":
        fmt = "verl"
        # VERL writes the tracker file after the save; max_actor_ckpt_to_keep deletes actor/ only.
        complete = any(actor.glob("model_world_size_*_rank_*.pt")) and (latest is None or step <= latest)
        lora = (actor / "lora_train_meta.json").exists() or None
    elif manifest is not None or (path / "model").is_dir():
        fmt = "local"
        complete = manifest is not None  # the local trainer writes its manifest last
        lora = (path / "model" / "adapter_config.json").exists()
    else:
        fmt, complete, lora = "unknown", False, None
    if manifest is not None and isinstance(manifest.get("lora"), bool):
        lora = manifest["lora"]
    return CheckpointInfo(step=step, path=path, size_bytes=dir_size(path) if with_size else 0,
                          has_manifest=manifest is not None,
                          format=fmt, complete=complete, is_latest=(latest == step), lora=lora, manifest=manifest)


def discover_checkpoints(run_dir: str | Path, with_size: bool = True) -> list[CheckpointInfo]:
    """Every `checkpoints/global_step_N` of the run, sorted by step (incomplete ones flagged).

    `with_size=False` skips walking each folder for its size (size_bytes is then 0)."""
    return _scan_checkpoints(run_dir, {}, with_size)[0]


def discover_new_checkpoints(run_dir: str | Path,
                             known: dict[int, str]) -> tuple[list[CheckpointInfo], set[int]]:
    """discover_checkpoints(with_size=False) for a sync that recorded most of them already: a folder whose step is
    in `known` (step -> its recorded resolved path) and that is still that path, not a link, is only noted as
    present (second value), not described again (a manifest read and a few stats each, 200 times a sync)."""
    return _scan_checkpoints(run_dir, known, with_size=False)


def _scan_checkpoints(run_dir: str | Path, known: dict[int, str],
                      with_size: bool) -> tuple[list[CheckpointInfo], set[int]]:
    root = RunDir(run_dir).checkpoints
    if not root.is_dir():
        return [], set()
    latest = latest_checkpointed_step(root)
    resolved = root.resolve()
    infos, present = [], set()
    with os.scandir(root) as entries:
        for entry in entries:
            m = STEP_DIR.match(entry.name) if known else None
            step = int(m.group(1)) if m else None
            if step is not None and known.get(step) == str(resolved / entry.name) \
                    and entry.is_dir(follow_symlinks=False):
                present.add(step)
                continue
            info = describe_checkpoint(root / entry.name, latest, with_size=with_size)
            if info is not None:
                infos.append(info)
    return sorted(infos, key=lambda i: i.step), present


# -- samples ---------------------------------------------------------------------------------

def sample_steps(run_dir: str | Path, kind: str = "val") -> list[int]:
    """Steps that have a `samples/<kind>/<step>.jsonl` dump, ascending."""
    try:
        root = RunDir(run_dir).samples_dir(kind)
    except RunDirError as exc:
        raise ValueError(str(exc)) from None
    if not root.is_dir():
        return []
    return sorted(int(p.stem) for p in root.glob("*.jsonl") if p.stem.isdigit())


def read_samples(run_dir: str | Path, kind: str = "val", step: int | None = None) -> list[dict[str, Any]]:
    """Rows of one sample dump (VERL `_write_generations` format); `step=None` = the latest.

    Rows are `{"input", "output", "gts", "score", "step", <reward extra keys>...}`; VERL
    writes NaN extras as bare NaN, which Python's json accepts. A torn last line is skipped.
    Rollout rows come normalised (`training.rollouts.normalize`): every key of the rollout store is
    there, derived from a VERL dump where it can be.
    """
    if step is None:
        steps = sample_steps(run_dir, kind)
        if not steps:
            return []
        step = steps[-1]
    rows = read_jsonl(RunDir(run_dir).samples(kind, step))
    return rollouts.normalize(rows, step) if kind == rollouts.KIND else rows


def sample_file(run_dir: str | Path, kind: str, step: int) -> Path:
    """The path of one sample dump (ValueError for an unknown kind)."""
    try:
        return RunDir(run_dir).samples(kind, step)
    except RunDirError as exc:
        raise ValueError(str(exc)) from None


def iter_sample_lines(run_dir: str | Path, kind: str, step: int):
    """Yield (byte offset, row) for each readable line of one sample dump, streaming (a torn or foreign line
    is skipped; a missing file yields nothing): what a bounded index of a large dump is built from."""
    path = sample_file(run_dir, kind, step)
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        offset = 0
        for line in fh:
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(row, dict):
                yield start, row


def read_sample_at(run_dir: str | Path, kind: str, step: int, offset: int) -> dict[str, Any] | None:
    """The row whose line starts at `offset` of one sample dump (None when it is gone or unreadable)."""
    try:
        with sample_file(run_dir, kind, step).open("rb") as fh:
            fh.seek(max(0, int(offset)))
            row = json.loads(fh.readline())
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return None
    return row if isinstance(row, dict) else None


# -- metrics computed from rollout dumps -----------------------------------------------------

def rollout_groups(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """One rollout dump's scores grouped by prompt, in order of first appearance.

    VERL's dump has no group id (a `uid` column is used when present) and `balance_batch` reorders
    rows, so a prompt's samples are found by their `input` text; two identical prompts in one batch
    count as one group.
    """
    groups: dict[Any, list[Any]] = {}
    for row in rows:
        key = row.get("uid")
        key = ("uid", str(key)) if key is not None else ("input", str(row.get("input")))
        groups.setdefault(key, []).append(row.get("score"))
    return list(groups.values())


def rollout_metrics(run_dir: str | Path, step: int) -> Metrics:
    """Metrics the trainer does not log but its `samples/rollout/<step>.jsonl` dump gives ({} without one):
    VERL's tied-group share, the per-component reward series (`training.rollouts.component_metrics`) and the
    shares of garbled responses (`training.garbled`). Read from the summary the trainer wrote beside the dump
    (`write_rollout_summary`) when it is there and describes this very file; computed from the dump when not
    (older runs, a trainer that wrote none)."""
    summary = rollouts.summary_path(run_dir, step)
    try:
        stat = sample_file(run_dir, rollouts.KIND, step).stat()
        data = json.loads(summary.read_bytes())
        if data.get("dump") == [stat.st_size, stat.st_mtime_ns] and isinstance(data.get("metrics"), dict):
            return data["metrics"]
    except (OSError, ValueError, AttributeError):
        pass
    return compute_rollout_metrics(run_dir, step)


def compute_rollout_metrics(run_dir: str | Path, step: int) -> Metrics:
    """`rollout_metrics` from the dump itself."""
    from training.garbled import garbled_metrics
    from training.guard_builtins import TIED_SHARE, tied_group_share

    rows = read_samples(run_dir, "rollout", step)
    share = tied_group_share(rollout_groups(rows))
    out = {**rollouts.component_metrics(rows), **garbled_metrics(rows)}
    if share is not None:
        out[TIED_SHARE] = share
    return out


def write_rollout_summary(run_dir: str | Path, step: int) -> Path | None:
    """The trainer's side: once it has written a step's rollout dump, the dump's metrics beside it
    (`samples/rollout/<step>.summary.json`, with the dump's size and time, so a dump rewritten later is not
    described by an old summary). None when there is no dump."""
    try:
        stat = sample_file(run_dir, rollouts.KIND, step).stat()
    except FileNotFoundError:
        return None
    metrics = compute_rollout_metrics(run_dir, step)
    return write_json(rollouts.summary_path(run_dir, step),
                      {"step": int(step), "dump": [stat.st_size, stat.st_mtime_ns], "metrics": metrics}, indent=None)


def validation_metrics(run_dir: str | Path, step: int) -> Metrics:
    """Win rate (ties ½) with wins / ties / losses and accuracy from `samples/val/<step>.jsonl` ({} without one).

    VERL logs only the mean of the reward's `win` key; the local backend logs these itself (same rule)."""
    from training.winrate import validation_metrics as from_rows

    return dict(from_rows(read_samples(run_dir, "val", step)))


def derived_metrics(run_dir: str | Path, step: int) -> Metrics:
    """Everything the step's sample dumps give that a trainer may not log (rollout and validation)."""
    return {**rollout_metrics(run_dir, step), **validation_metrics(run_dir, step)}
