"""What VERL's override list plans besides the settings: batch sizes over the GPUs, epochs, the resume mode
and the run's paths. Every function here takes plain numbers, paths and strings, never the job spec
(`training.backends.verl_overrides.VerlJob` reads the spec once and passes on what these need).
Nothing here touches the file system except `decide_resume`, which resolves paths.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from training.backends.base import BackendError
from training.rundir import RunDir
from training.verl_cpu import ray_temp_dir


@dataclass(frozen=True)
class BatchPlan:
    """Batch sizes in VERL's units: train/mini batches count prompts, micro batches samples/GPU."""

    train_batch_size: int
    ppo_mini_batch_size: int
    micro_batch_size_per_gpu: int
    log_prob_micro_batch_size_per_gpu: int


@dataclass(frozen=True)
class GpuPlan:
    n_gpus_per_node: int  # the student (actor + rollout) pool
    nnodes: int
    teacher_gpus_per_node: int = 0  # on-policy distillation: the teacher's own pool

    @property
    def student_gpus(self) -> int:
        return self.n_gpus_per_node * self.nnodes


@dataclass(frozen=True)
class VerlPaths:
    """Absolute paths the overrides point at (all inside the run directory)."""

    run_dir: Path
    train_parquet: Path
    val_parquet: Path
    reward_module: Path | None
    attempt: int

    @property
    def checkpoints(self) -> Path:
        return RunDir(self.run_dir).checkpoints

    @property
    def ray_tmp(self) -> str:
        """A CPU run's private Ray temp dir for this attempt."""
        return ray_temp_dir(self.run_dir, self.attempt)

    @property
    def hydra_dir(self) -> Path:
        return RunDir(self.run_dir).attempt(self.attempt).hydra

    def samples_dir(self, which: str) -> Path:
        return RunDir(self.run_dir).samples_dir(which)


@dataclass(frozen=True)
class Resume:
    mode: str  # "disable" | "auto" | "resume_path"
    path: str | None = None


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, max(1, min(n, cap)) + 1) if n % d == 0)


def plan_batches(
    batch_size: int, group_size: int, n_gpus: int, n_train_rows: int,
    mini_batch_size: int | None = None, micro_batch_size: int | None = None,
) -> BatchPlan:
    """Pick batch sizes that pass VERL's checks for `n_gpus` data-parallel ranks.

    VERL requires (utils/config.py validate_config, workers/engine_workers.py):
    train*n % n_gpus == 0, mini <= train, mini*n % n_gpus == 0; we also keep train % mini == 0
    and micro | mini*n/n_gpus so no update step gets a ragged micro batch. `batch_size` counts
    prompts per step and is capped at the number of training rows (VERL drops the last partial
    batch, so a bigger batch would mean zero steps).
    """
    if batch_size < 1 or group_size < 1 or n_gpus < 1:
        raise BackendError("batch_size, group_size and GPU count must all be >= 1")
    if n_train_rows < 1:
        raise BackendError("the training split is empty")
    # Prompts per step must be a multiple of `unit` so that prompts*group_size spreads over all GPUs.
    unit = n_gpus // math.gcd(group_size, n_gpus)
    train = (min(batch_size, n_train_rows) // unit) * unit
    if train < 1:
        raise BackendError(
            f"cannot split batches over {n_gpus} GPUs: need at least {unit} training prompts per step "
            f"(batch_size={batch_size}, rows={n_train_rows}, group_size={group_size})")
    mini_target = min(mini_batch_size or train, train)
    mini = max((m for m in range(unit, mini_target + 1, unit) if train % m == 0), default=train)
    per_gpu = mini * group_size // n_gpus
    micro = _largest_divisor_at_most(per_gpu, micro_batch_size or 4)
    return BatchPlan(train, mini, micro, micro)


def plan_epochs(epochs: int, max_steps: int | None) -> int:
    """VERL's trainer.total_epochs: VERL stops at the end of its last epoch even before
    trainer.total_training_steps, so a job with max_steps gets at least max_steps epochs (each epoch
    is at least one step; VERL stops at max_steps, and prompts it leaves out for length cannot make it
    run short). Without max_steps the form's epochs count."""
    return max(int(epochs), int(max_steps or 0))


def decide_resume(resume_from: str | None, run_dir: Path, attempt: int, own_latest_step: int | None) -> Resume:
    """Choose VERL's resume mode for this attempt (`resume_from`: the job spec's).

    - `resume_from` inside this run's own checkpoints: an explicit restore (KL guard) -> that step.
    - a later attempt with its own checkpoints: continue from them (`auto` reads
      latest_checkpointed_iteration.txt), even if the run was branched from a parent.
    - `resume_from` elsewhere (a parent run): a branch; the run dir is new, the parent stays intact.
    - a later attempt without checkpoints: `auto` (VERL starts from scratch).
    - attempt 1: `disable`.
    """
    own = RunDir(run_dir).checkpoints.resolve()
    if resume_from:
        path = Path(str(resume_from).rstrip("/"))
        if not path.is_absolute():
            raise BackendError(f"resume_from must be an absolute path, got {resume_from!r}")
        if not re.fullmatch(r"global_step_\d+", path.name):
            # VERL parses the step as int(path.split("global_step_")[-1]).
            raise BackendError(f"resume_from must name a global_step_N folder, got {resume_from!r}")
        if path.parent.resolve() == own:
            return Resume("resume_path", str(path))
        if attempt > 1 and own_latest_step is not None:
            return Resume("auto")
        return Resume("resume_path", str(path))
    return Resume("auto" if attempt > 1 else "disable")
