"""job.json -> a validated Job for the local trainers; bad values fail with a clear message.

The hyperparameters are the schema's (`training.hparams`): every setting the local backend reads
(`Setting.local`), its default, type, choices and range from there, and the checks between settings
from `training.hparams.local_hp` — the same ones the New job form runs. Nothing here lists or
coerces a setting by hand.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from training import hparams
from training.hparams import LOCAL_SETTINGS, HpError, local_hp
from training.jobspec import JobSpecError, read_spec

KINDS = hparams.KINDS


class JobError(ValueError):
    """A job the local backend refuses to run; the message names the offending field."""


def parse_hp(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The hp block for the local backend: every local setting, typed by the schema (its default when
    absent); keys of the other backend are left out. JobError names the first bad value."""
    out, errors = hparams.parse_section(raw, LOCAL_SETTINGS)
    _raise_first(errors)
    return out


def _raise_first(errors: dict[str, str]) -> None:
    if errors:
        key, message = next(iter(errors.items()))
        raise JobError(f"hp.{key}: {message}")


class HParams(SimpleNamespace):
    """The local settings as attributes (`hp.lr`, `hp.lora["rank"]`): `HParams(**job_json_hp)`."""

    def __init__(self, **values: Any) -> None:
        super().__init__(**parse_hp(values))

    @classmethod
    def checked(cls, values: dict[str, Any]) -> HParams:
        """From values the schema has already typed and checked (`local_hp`): no second pass."""
        hp = cls.__new__(cls)
        SimpleNamespace.__init__(hp, **values)
        return hp

    def as_dict(self) -> dict[str, Any]:
        return copy.deepcopy(vars(self))


@dataclass
class Job:
    run_dir: Path
    kind: str
    model_path: Path
    train_path: Path
    val_path: Path | None
    hp: HParams
    teacher_path: Path | None = None
    reward: dict | None = None
    resume_from: Path | None = None
    sandbox: dict = field(default_factory=dict)
    job_id: str = ""

    @property
    def lora_rank(self) -> int:
        return int(self.hp.lora.get("rank", 0) or 0)


def _path(run_dir: Path, value: Any, what: str) -> Path:
    if not value or not isinstance(value, str):
        raise JobError(f"{what} is missing from job.json")
    p = Path(value)
    return p if p.is_absolute() else run_dir / p


def load_job(run_dir: str | Path) -> Job:
    """Read and validate `<run_dir>/job.json`: its hp typed and checked once, as the New job form checks them
    (`hparams.local_hp`, run while the spec is read), then what is on disk."""
    run_dir = Path(run_dir).resolve()
    try:
        spec = read_spec(run_dir, hp_check=local_hp)
    except (JobSpecError, HpError) as exc:
        raise JobError(str(exc)) from None
    job = Job(
        run_dir=run_dir, kind=spec.kind,
        model_path=_path(run_dir, spec.model.path, "model.path"),
        train_path=_path(run_dir, spec.data.train, "data.train"),
        val_path=_path(run_dir, spec.data.val, "data.val") if spec.data.val else None,
        hp=HParams.checked(spec.hp),
        teacher_path=_path(run_dir, spec.teacher.path, "teacher.path") if spec.teacher else None,
        reward=spec.reward.to_dict() if spec.reward.components else None,
        resume_from=Path(spec.resume_from) if spec.resume_from else None,
        sandbox=spec.sandbox, job_id=spec.job_id,
    )
    validate(job)
    return job


def _check_folder(path: Path | None, what: str) -> None:
    if path is not None and not (path / "config.json").exists():
        raise JobError(f"{what} {path} is not an HF model folder (no config.json)")


def validate(job: Job) -> None:
    """What the local backend needs besides the settings' own checks (the form's, which load_job runs): the
    model and data on disk, a reward for GRPO, a teacher for distillation, a resumable checkpoint.
    Data-dependent checks live with the trainers."""
    _check_folder(job.model_path, "model.path")
    if not job.train_path.is_file():
        raise JobError(f"training data {job.train_path} does not exist")
    if job.val_path is not None and not job.val_path.is_file():
        raise JobError(f"validation data {job.val_path} does not exist")
    if job.kind == "grpo" and not job.reward:
        raise JobError("a GRPO job needs a reward block with at least one component")
    if job.kind == "distill":
        if job.teacher_path is None:
            raise JobError("a distillation job needs teacher.path")
        _check_folder(job.teacher_path, "teacher.path")
    if job.resume_from is not None:
        if not job.resume_from.is_dir() or not job.resume_from.name.startswith("global_step_"):
            raise JobError(f"resume_from must be an existing global_step_N folder, got {job.resume_from}")
        if not (job.resume_from / "trainer_state.pt").exists():
            raise JobError(f"{job.resume_from} is not a local-backend checkpoint (no trainer_state.pt)")
