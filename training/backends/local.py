"""The local torch backend: `python -m training.local.train --run-dir DIR`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from training.backends.base import (
    REPO_ROOT,
    BackendError,
    LaunchPlan,
    attempt_dir,
    base_env,
    python_executable,
)
from training.rundir import RunDir


class LocalBackend:
    name = "local"

    def prepare(self, run_dir: Path, attempt: int) -> LaunchPlan:
        """Return the command for the local trainer; it reads (and checks) job.json itself."""
        run_dir = Path(run_dir).resolve()
        if not RunDir(run_dir).job_spec.exists():
            raise BackendError(f"{run_dir} has no job.json: the web app writes it before launch")
        attempt_dir(run_dir, attempt)
        argv = [python_executable(), "-m", "training.local.train", "--run-dir", str(run_dir)]
        return LaunchPlan(argv=argv, env=base_env(run_dir, attempt), cwd=str(REPO_ROOT))

    def dry_run(self, spec: dict[str, Any], run_dir: Path) -> str:
        run_dir = Path(run_dir).resolve()
        lines = [f"# run dir: {run_dir}", "python -m training.local.train", f"--run-dir {run_dir}"]
        return "\n".join(lines) + "\n"
