"""The job spec, `<run_dir>/job.json`: what to train. The web app writes it; both backends read it.

Typed and versioned. `JobSpec.from_dict` refuses a spec it cannot trust (a newer version, an unknown
kind or backend, no model or training data, a malformed reward block) with a message that names
the field; `to_dict` is exactly what the file holds. The hyperparameter blocks (`hp`, `verl`)
stay mappings here: their schema lives with the settings, and each backend checks the
keys it uses. docs/run-directory.md shows an example that a test parses with `from_dict`.

Standard library only.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from training.hparams import BACKENDS, KINDS
from training.reward_mix import SHAPINGS
from training.rundir import RunDir, write_json

SPEC_VERSION = 1  # a file without "version" predates versioning and has the same shape as version 1
COMPONENT_TYPES = ("function", "model")


class JobSpecError(ValueError):
    """A job spec that cannot be used; the message names the field."""


def _obj(value: Any, what: str, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise JobSpecError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _text(value: Any, what: str, required: bool = True) -> str:
    if value is None or value == "":
        if required:
            raise JobSpecError(f"{what} is missing from job.json")
        return ""
    if not isinstance(value, str):
        raise JobSpecError(f"{what} must be a string, got {value!r}")
    return value


def _choice(value: Any, options: tuple[str, ...], what: str) -> str:
    if value not in options:
        raise JobSpecError(f"{what} must be one of {options}, not {value!r}")
    return value


@dataclass(frozen=True)
class ModelRef:
    path: str  # an absolute local HF folder, or a hub id for workers with hub access
    name: str = ""

    @classmethod
    def from_dict(cls, raw: Any, what: str) -> ModelRef:
        raw = _obj(raw, what)
        return cls(path=_text(raw.get("path"), f"{what}.path"), name=_text(raw.get("name"), f"{what}.name", False))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, **({"name": self.name} if self.name else {})}


@dataclass(frozen=True)
class DataFiles:
    train: str = "data/train.jsonl"  # relative to the run directory
    val: str | None = "data/val.jsonl"

    @classmethod
    def from_dict(cls, raw: Any) -> DataFiles:
        raw = _obj(raw, "data")
        return cls(train=_text(raw.get("train"), "data.train"), val=_text(raw.get("val"), "data.val", False) or None)

    def to_dict(self) -> dict[str, Any]:
        return {"train": self.train, **({"val": self.val} if self.val else {})}


@dataclass(frozen=True)
class RewardComponent:
    type: str  # "function": a pinned source under reward/; "model": a reward-model folder
    path: str
    weight: float = 1.0
    name: str = ""  # function: the entry point; model: the display name
    version_id: int | None = None
    sha256: str = ""

    @classmethod
    def from_dict(cls, raw: Any, i: int) -> RewardComponent:
        what = f"reward.components[{i}]"
        raw = _obj(raw, what)
        weight = raw.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise JobSpecError(f"{what}.weight must be a number, got {weight!r}")
        version_id = raw.get("version_id")
        if version_id is not None and (isinstance(version_id, bool) or not isinstance(version_id, int)):
            raise JobSpecError(f"{what}.version_id must be an integer, got {version_id!r}")
        return cls(type=_choice(raw.get("type"), COMPONENT_TYPES, f"{what}.type"), path=_text(raw.get("path"),
                   f"{what}.path"), weight=float(weight), name=_text(raw.get("name"), f"{what}.name", False),
                   version_id=version_id, sha256=_text(raw.get("sha256"), f"{what}.sha256", False))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "path": self.path}
        if self.name:
            out["name"] = self.name
        out["weight"] = self.weight
        if self.version_id is not None:
            out["version_id"] = self.version_id
        if self.sha256:
            out["sha256"] = self.sha256
        return out


@dataclass(frozen=True)
class RewardBlock:
    shaping: str = "raw"
    components: tuple[RewardComponent, ...] = ()

    @classmethod
    def from_dict(cls, raw: Any) -> RewardBlock:
        raw = _obj(raw, "reward", required=False)
        comps = raw.get("components") or []
        if not isinstance(comps, list):
            raise JobSpecError("reward.components must be a list")
        return cls(shaping=_choice(raw.get("shaping", "raw"), SHAPINGS, "reward.shaping"),
                   components=tuple(RewardComponent.from_dict(c, i) for i, c in enumerate(comps)))

    def to_dict(self) -> dict[str, Any]:
        return {"shaping": self.shaping, "components": [c.to_dict() for c in self.components]}


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    kind: str
    backend: str
    model: ModelRef
    hp: dict[str, Any]
    data: DataFiles = field(default_factory=DataFiles)
    reward: RewardBlock = field(default_factory=RewardBlock)
    teacher: ModelRef | None = None
    verl: dict[str, Any] | None = None  # VERL-only settings (rollout engine, GPUs, nodes)
    resume_from: str | None = None  # a global_step_N folder of this run or a parent run
    sandbox: dict[str, Any] = field(default_factory=dict)  # training.sandbox.SandboxLimits fields
    version: int = SPEC_VERSION

    @classmethod
    def from_dict(cls, raw: Any) -> JobSpec:
        raw = _obj(raw, "job.json")
        version = raw.get("version", SPEC_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise JobSpecError(f"version must be a whole number >= 1, got {version!r}")
        if version > SPEC_VERSION:
            raise JobSpecError(f"job.json has version {version}, newer than this code reads ({SPEC_VERSION}): "
                               "update the training code on this worker")
        job_id = raw.get("job_id")
        return cls(
            job_id=str(job_id) if isinstance(job_id, (int, str)) and job_id != "" else _text(job_id, "job_id"),
            kind=_choice(raw.get("kind"), KINDS, "kind"), backend=_choice(raw.get("backend", "local"), BACKENDS,
                                                                          "backend"),
            model=ModelRef.from_dict(raw.get("model"), "model"), hp=dict(_obj(raw.get("hp") or {}, "hp")),
            data=DataFiles.from_dict(raw.get("data")), reward=RewardBlock.from_dict(raw.get("reward")),
            teacher=ModelRef.from_dict(raw["teacher"], "teacher") if raw.get("teacher") else None,
            verl=dict(_obj(raw["verl"], "verl")) if raw.get("verl") is not None else None,
            resume_from=_text(raw.get("resume_from"), "resume_from", False) or None,
            sandbox=dict(_obj(raw.get("sandbox") or {}, "sandbox")), version=version)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "job_id": self.job_id, "kind": self.kind,
                               "backend": self.backend, "model": self.model.to_dict(), "data": self.data.to_dict(),
                               "reward": self.reward.to_dict(), "hp": self.hp}
        if self.teacher is not None:
            out["teacher"] = self.teacher.to_dict()
        if self.verl is not None:
            out["verl"] = self.verl
        out["resume_from"] = self.resume_from
        out["sandbox"] = self.sandbox
        return out

    def write(self, run_dir: str | Path) -> Path:
        """Write this spec as `<run_dir>/job.json` (atomically); returns the file's path. Whoever runs the job
        reads it back (`read_spec`): the backend's `prepare` and the trainer."""
        return write_json(RunDir(run_dir).job_spec, self.to_dict())


def write_spec(run_dir: str | Path, raw: dict[str, Any]) -> Path:
    """Check `raw` as a job spec and write it as `<run_dir>/job.json`, once; returns the file's path."""
    return JobSpec.from_dict(raw).write(run_dir)


HpCheck = Callable[[str, dict[str, Any]], dict[str, Any]]  # (kind, hp) -> the checked hp; raises ValueError


def read_spec(run_dir: str | Path, hp_check: HpCheck | None = None) -> JobSpec:
    """Read and check `<run_dir>/job.json`; JobSpecError says what is wrong with it.

    `hp_check(kind, hp) -> hp` types and checks the hyperparameters as a backend reads them (the local trainer
    passes `training.hparams.local_hp`, the New job form's checks, which raises "hp.<key>: <message>"); the spec
    holds what it returns."""
    path = RunDir(run_dir).job_spec
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JobSpecError(f"no job.json in {Path(run_dir)}") from None
    except ValueError as exc:
        raise JobSpecError(f"{path} is not valid JSON: {exc}") from None
    spec = JobSpec.from_dict(raw)
    return spec if hp_check is None else replace(spec, hp=hp_check(spec.kind, spec.hp))
