"""The run directory: every file the web app and `training/` exchange, named in one place.

`training/` never imports Django; the web app and the training processes talk only through the
files of a run directory. `RunDir` and `AttemptDir` name every path; `write_atomic` is the one way
to replace a file that another process may read at the same moment; `read_jsonl` is the one JSONL
reader. docs/run-directory.md shows `LAYOUT` verbatim (a test keeps the two equal).

A run directory belongs to exactly one job: `claim_run_dir` creates a fresh folder whose name holds
a random run id, so a job whose database id repeats (a reset or restored database, two sites on one
volume) never writes into, reads from or resumes from another job's files.

Standard library only: the supervisor imports this and must start fast (orjson, where installed, speeds up
`read_jsonl`; it is imported on first use).
"""
from __future__ import annotations

import gc
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# One line per path: (path, what it holds and who writes it). The docs' layout block is built from this.
LAYOUT: tuple[tuple[str, str], ...] = (
    ("job.json", "the job spec (see below), rewritten by the web app before each attempt"),
    ("data/train.jsonl", "the pinned rows the job trains on (written by the web app)"),
    ("data/val.jsonl", "the pinned validation rows"),
    ("data/<split>.parquet", "VERL: the pinned rows in VERL's schema (training.parquet), written by the VERL backend"),
    ("verl/reward.json", "VERL: the reward wrapper's config (training.backends.verl_reward)"),
    ("verl/reward_fn.py", "VERL: the entry point VERL's custom_reward_function imports"),
    ("reward/<name>.py", "pinned reward-function sources (one file per function component)"),
    ("attempts/<K>/", "K = 1, 2, ... one folder per launch (fresh start, resume, KL-guard restore)"),
    ("  launch.json", '{"argv": [...], "env": {...}, "cwd": "...", "scratch_dirs": [...]}  written by the web app'),
    ("", "scratch_dirs: private to the attempt (a CPU VERL run's Ray temp dir); the"),
    ("", "supervisor kills any process still naming one and deletes them at the end;"),
    ("", 'a job sent to a Ray cluster adds "cancel_argv" (`ray job stop ...`) and'),
    ("", '"ray_job": {"address", "submission_id"} (training.ray_cluster)'),
    ("  supervisor.pid", "pid of `python -m training.supervisor` (its own process group)"),
    ("  heartbeat", 'rewritten every 2 s by the supervisor: {"time": <unix>, "pid": <child pid>, "host": <name>}'),
    ("", "(from a thread: also while it waits on a slow stop such as `ray job stop`)"),
    ("  log.txt", "stdout+stderr of the training process"),
    ("  metrics.jsonl", 'VERL file-logger format, one line per step: {"step": N, "data": {name: number|null}}'),
    ("  CANCEL", "created by the web app to ask the supervisor to stop the process group"),
    ("  LOST", "created when the web app gave the attempt up (stale heartbeat): the supervisor stops the group"),
    ("  KILLED", '{"time", "host", "pids"}: nothing of the attempt runs on that host any more (kill_attempt)'),
    ("  exit.json", 'written by the supervisor at the end: {"returncode": int, "cancelled": bool, "ended_at": unix}'),
    ("", '(+ "ray_status" for a Ray job, and "lost": why, when Ray reports it dead)'),
    ("  stacks/<unix>.txt", "stack dumps of the attempt's processes, taken when a stall is detected"),
    ("", "(training.diagnostics: py-spy, or faulthandler-<pid>.txt where the trainer registered one)"),
    ("  overrides.txt", "VERL: the attempt's Hydra override list, for humans"),
    ("  resolved.txt", "VERL: each setting at the key VERL resolved it to, checked against the plan before launch"),
    ("  hydra/", "VERL: Hydra's output folder (.hydra/*.yaml: the composed configuration)"),
    ("checkpoints/", "one global_step_N/ folder per save (training.checkpoints)"),
    ("  latest_checkpointed_iteration.txt", '"N", rewritten after every successful save (as VERL does)'),
    ("  protected.json", "steps the web app forbids the trainer to delete (a JSON list)"),
    ("  global_step_N/manifest.json", '{"step", "time", "kind", "metrics", "format": "local"|"verl", "lora", '
                                      '"attempt"}'),
    ("samples/val/<step>.jsonl", 'validation samples: {"input", "output", "gts", "score", "step", "reference", ...}'),
    ("samples/rollout/<step>.jsonl", "rollout store: each step's samples (training/rollouts.py), pruned by retention"),
    ("samples/rollout/<step>.summary.json", 'the trainer\'s summary of that dump: {"step", "dump": [size, mtime_ns], '
                                            '"metrics"}'),
    ("export/global_step_N/", "HF exports of checkpoints (a download's zip sits beside them)"),
    ("diagnostics/<id>.zip", "diagnostic bundles (webapp/monitoring/services/bundle.py), secrets scrubbed"),
    ("human_evals/<id>/", "a periodic human evaluation: spec.json, pairs.jsonl (training.arena), log.txt"),
    ("judges/<id>/", "an automatic judge: pairs.jsonl, judge.json, result.json (training.judges), log.txt"),
)

JOB_SPEC = "job.json"
SAMPLE_KINDS = ("val", "rollout")
_TMP_PREFIX = ".tmp-"  # also skipped by training.checkpoints when it lists a folder


class RunDirError(ValueError):
    """A run directory that cannot be used as asked; the message says why."""


def layout_text() -> str:
    """The layout block of docs/run-directory.md."""
    width = max(len(path) for path, _ in LAYOUT) + 4
    lines = ["<run_dir>/"] + [f"  {path:<{width}}# {what}" for path, what in LAYOUT]
    return "\n".join(lines) + "\n"


# -- files -------------------------------------------------------------------------------------

def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Replace `path` so that a reader sees the old content or the new, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: str | Path, data: Any, indent: int | None = 1) -> Path:
    return write_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False))


def write_jsonl(path: str | Path, rows: Any) -> Path:
    """One JSON object per line, written atomically (values JSON cannot hold become strings)."""
    return write_atomic(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows))


def read_json(path: str | Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _loads(line: str) -> Any:
    """json.loads, twice as fast through orjson where it is installed (a 10 MB rollout dump is read at each sync);
    what orjson refuses and Python's json accepts (VERL's bare NaN) goes to json.loads. One difference stays: an
    integer beyond 64 bits comes as a float, so strict reads (pinned data) keep Python's json."""
    global _fast
    if _fast is None:
        try:
            from orjson import loads as fast
        except ImportError:
            fast = json.loads
        _fast = fast
    try:
        return _fast(line)
    except ValueError:
        return json.loads(line)


_fast = None


def read_jsonl(path: str | Path, *, strict: bool = False) -> list[dict[str, Any]]:
    """The objects of a JSONL file, in order; blank lines are skipped.

    strict=False (files another process may be writing: samples, dumps): a missing file is empty
    and a torn or foreign line is skipped. strict=True (inputs: pinned data): a missing file or a
    bad line raises RunDirError naming the file and line.
    """
    path = Path(path)
    rows: list[dict[str, Any]] = []
    try:
        fh = path.open(encoding="utf-8", errors="strict" if strict else "replace")
    except FileNotFoundError:
        if strict:
            raise RunDirError(f"data file not found: {path}") from None
        return rows
    # Parsed rows hold no reference cycles: pausing the collector keeps a 10 MB rollout dump from setting off
    # repeated collections of the whole heap while it is read.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line) if strict else _loads(line)
                except ValueError as exc:
                    if strict:
                        raise RunDirError(f"{path.name} line {lineno} is not valid JSON: {exc}") from None
                    continue
                if not isinstance(row, dict):
                    if strict:
                        raise RunDirError(f"{path.name} line {lineno} is not a JSON object")
                    continue
                rows.append(row)
    finally:
        if collecting:
            gc.enable()
    return rows


# -- paths -------------------------------------------------------------------------------------

def check_attempt(number: Any) -> int:
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise RunDirError(f"attempt must be an integer >= 1, got {number!r}")
    return number


@dataclass(frozen=True)
class AttemptDir:
    """`<run_dir>/attempts/<K>`: one launch of the job, owned by one supervisor."""

    path: Path

    @property
    def number(self) -> int:
        return int(self.path.name)

    @property
    def launch(self) -> Path:
        return self.path / "launch.json"

    @property
    def supervisor_pid(self) -> Path:
        return self.path / "supervisor.pid"

    @property
    def heartbeat(self) -> Path:
        return self.path / "heartbeat"

    @property
    def log(self) -> Path:
        return self.path / "log.txt"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def cancel(self) -> Path:
        return self.path / "CANCEL"

    @property
    def exit(self) -> Path:
        return self.path / "exit.json"

    @property
    def lost(self) -> Path:
        return self.path / "LOST"

    @property
    def killed(self) -> Path:
        return self.path / "KILLED"

    @property
    def stacks(self) -> Path:
        return self.path / "stacks"

    @property
    def verl_overrides(self) -> Path:
        return self.path / "overrides.txt"

    @property
    def verl_resolved(self) -> Path:
        return self.path / "resolved.txt"

    @property
    def hydra(self) -> Path:
        return self.path / "hydra"

    def create(self) -> AttemptDir:
        self.path.mkdir(parents=True, exist_ok=True)
        return self


@dataclass(frozen=True)
class RunDir:
    """The paths of one run directory (nothing is created until asked)."""

    path: Path

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))

    @property
    def job_spec(self) -> Path:
        return self.path / JOB_SPEC

    def data(self, split: str) -> Path:
        if split not in ("train", "val"):
            raise RunDirError(f"split must be 'train' or 'val', not {split!r}")
        return self.path / "data" / f"{split}.jsonl"

    def parquet(self, split: str) -> Path:
        """VERL's copy of a pinned split (data/<split>.parquet)."""
        return self.data(split).with_suffix(".parquet")

    @property
    def reward_dir(self) -> Path:
        return self.path / "reward"

    @property
    def verl_dir(self) -> Path:
        return self.path / "verl"

    @property
    def verl_reward_config(self) -> Path:
        return self.verl_dir / "reward.json"

    @property
    def verl_reward_module(self) -> Path:
        return self.verl_dir / "reward_fn.py"

    @property
    def attempts_dir(self) -> Path:
        return self.path / "attempts"

    def attempt(self, number: int) -> AttemptDir:
        return AttemptDir(self.attempts_dir / str(check_attempt(number)))

    def attempts(self) -> list[AttemptDir]:
        """The attempt folders on disk, in launch order."""
        if not self.attempts_dir.is_dir():
            return []
        found = [p for p in self.attempts_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) >= 1]
        return [AttemptDir(p) for p in sorted(found, key=lambda p: int(p.name))]

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def samples_dir(self, kind: str = "val") -> Path:
        if kind not in SAMPLE_KINDS:
            raise RunDirError(f"kind must be 'val' or 'rollout', not {kind!r}")
        return self.path / "samples" / kind

    def samples(self, kind: str, step: int) -> Path:
        return self.samples_dir(kind) / f"{int(step)}.jsonl"

    @property
    def export(self) -> Path:
        return self.path / "export"

    def export_step(self, step: int) -> Path:
        return self.export / f"global_step_{int(step)}"

    @property
    def diagnostics(self) -> Path:
        return self.path / "diagnostics"

    def human_eval(self, task_id: int) -> Path:
        return self.path / "human_evals" / str(int(task_id))

    def judge(self, run_id: int) -> Path:
        return self.path / "judges" / str(int(run_id))


def claim_run_dir(parent: str | Path, label: str) -> RunDir:
    """Create a new, empty run directory `<parent>/<label>-<run id>` and return it.

    The run id is random, so the folder cannot be one that an earlier job (with the same label,
    e.g. the same database id after a reset) left behind; creation fails rather than reuse one.
    """
    if not label or "/" in label or label.startswith("."):
        raise RunDirError(f"a run directory label must be a plain name, got {label!r}")
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"{label}-{uuid.uuid4().hex[:12]}"
    path.mkdir()  # FileExistsError on the (astronomically unlikely) collision: never share a folder
    return RunDir(path.resolve())


if __name__ == "__main__":  # prints the layout block of docs/run-directory.md
    print(layout_text(), end="")
