"""The backend contract: turn a run directory into the exact command that trains it.

A backend never starts anything itself. `prepare` reads the run directory's job.json (as the worker wrote it,
typed by `training.jobspec`), writes whatever files the backend needs into the run directory and returns a
`LaunchPlan`; the web app stores it as
`attempts/<K>/launch.json` and `python -m training.supervisor` runs it in its own process group.
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from training import rundir
from training.jobspec import JobSpecError, read_spec
from training.rundir import RunDir

# Repository root: `training/` must be importable by every process we launch (Ray workers too).
REPO_ROOT = Path(__file__).resolve().parents[2]


class BackendError(Exception):
    """A job that cannot be launched.

    `permanent=True` means retrying the same spec can never succeed (bad spec, too few GPUs);
    `permanent=False` is for conditions that may clear (a Ray cluster that is not reachable yet).
    """

    def __init__(self, message: str, permanent: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


@dataclass
class LaunchPlan:
    """What the supervisor runs: `argv` in `cwd` with `env` added to the worker's environment.

    `cancel_argv`, when set, must be run to stop the job: killing the process group is not
    enough for a job handed to a remote Ray cluster (`ray job stop ...`).
    `scratch_dirs` are private to the attempt (a local Ray cluster's temp dir): when the attempt
    ends, the supervisor kills every process that still names one and deletes them.
    """

    argv: list[str]
    env: dict[str, str]
    cwd: str
    cancel_argv: list[str] | None = None
    notes: list[str] = field(default_factory=list)
    scratch_dirs: list[str] = field(default_factory=list)
    # {"address", "submission_id"} of a job submitted to an existing Ray cluster (training.ray_cluster)
    ray_job: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the `launch.json` form (the keys of docs/run-directory.md plus the extras)."""
        data = asdict(self)
        for key in ("notes", "scratch_dirs"):
            if not data[key]:
                data.pop(key)
        for key in ("cancel_argv", "ray_job"):
            if data[key] is None:
                data.pop(key)
        return data


class Backend(Protocol):
    name: str

    def prepare(self, run_dir: Path, attempt: int) -> LaunchPlan:
        """Read `run_dir`'s job.json, write the backend's files into `run_dir` and return the command for attempt
        `attempt`."""
        ...

    def dry_run(self, spec: dict[str, Any], run_dir: Path) -> str:
        """Return a human-readable preview: the run dir, then one argument/override per line."""
        ...


def get_backend(name: str) -> Backend:
    """Return the backend registered as `name` ("local" or "verl")."""
    if name == "local":
        from training.backends.local import LocalBackend

        return LocalBackend()
    if name == "verl":
        from training.backends.verl import VerlBackend

        return VerlBackend()
    raise BackendError(f"unknown backend {name!r}: expected 'local' or 'verl'")


def load_spec(run_dir: Path) -> dict[str, Any]:
    """Read and check `<run_dir>/job.json` (training.jobspec); its plain form for the override builders."""
    try:
        return read_spec(run_dir).to_dict()
    except JobSpecError as exc:
        raise BackendError(f"job spec: {exc}") from None


def check_attempt(attempt: int) -> int:
    try:
        return rundir.check_attempt(attempt)
    except rundir.RunDirError as exc:
        raise BackendError(str(exc)) from None


def attempt_dir(run_dir: Path, attempt: int) -> Path:
    """Return (and create) `<run_dir>/attempts/<K>`."""
    return RunDir(Path(run_dir).resolve()).attempt(check_attempt(attempt)).create().path


def metrics_path(run_dir: Path, attempt: int, create: bool = True) -> Path:
    """One metrics file per attempt: VERL's file logger truncates its file on every start."""
    attempt_path = RunDir(Path(run_dir).resolve()).attempt(check_attempt(attempt))
    return (attempt_path.create() if create else attempt_path).metrics


def base_env(run_dir: Path, attempt: int, create: bool = True) -> dict[str, str]:
    """Environment shared by both backends (added on top of the worker's own environment)."""
    pythonpath = os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")] if p)
    return {
        "VERL_FILE_LOGGER_PATH": str(metrics_path(run_dir, attempt, create)),
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
        # The default VERL logger list includes wandb; make sure nothing phones home anyway.
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
    }


def python_executable() -> str:
    """The interpreter of the calling worker: the GPU image and the web venv each launch their own."""
    return os.environ.get("RLHF_TRAIN_PYTHON") or sys.executable
