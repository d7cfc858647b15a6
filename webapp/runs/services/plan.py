"""A new job: every input of a launch validated once (the plan), with the settings resolved by the schema
(`training.hparams`) and the length pre-flight, and the plan saved as a queued job (`job_create`). What the job
becomes on disk (job.json) is `spec.py`; what happens to it afterwards (resume, rollback, cancel) is `launch.py`."""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from training import hparams as cfg
from training.length_preflight import LENGTH_SETTINGS
from training.length_preflight import check as preflight_check
from training.reward_mix import SHAPINGS
from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardVersion
from webapp.rewards.probes import probe_gate
from webapp.rewards.services import reward_spec_validate
from webapp.runs.models import Checkpoint, Job, JobAttempt, JobState
from webapp.runs.services import events
from webapp.runs.services.data import Pinned, select_rows
from webapp.runs.services.events import record_event
from webapp.runs.services.lengths import length_preflight


@dataclass
class JobPlan:
    """A launch, decided once: its inputs, the resolved config, the pinned data and rewards, and every
    error and warning. `job_create(plan=...)` saves it; `spec.plan_preview(plan)` renders it."""

    project: Any
    kind: str
    backend: str
    preset: str
    config: dict
    errors: dict[str, str]
    warnings: dict[str, str]
    reward_spec: dict
    dataset_version: DatasetVersion | None = None
    base_model: ModelEntry | None = None
    teacher_model: ModelEntry | None = None
    include_unreviewed: bool = False
    reward_versions: list[RewardVersion] = field(default_factory=list)
    reward_models: list[ModelEntry] = field(default_factory=list)
    pinned: Pinned | None = None
    lengths: dict | None = None  # the length pre-flight (webapp/runs/services/lengths.py)

    @property
    def ok(self) -> bool:
        return not self.errors


def normalize_reward_spec(reward_spec: Any) -> dict[str, Any]:
    spec = reward_spec if isinstance(reward_spec, dict) else {}
    return {"shaping": spec.get("shaping") or "raw", "components": list(spec.get("components") or [])}


def _resolve_rewards(project, reward_spec: dict, errors: dict) -> tuple[dict, list[RewardVersion], list[ModelEntry]]:
    """Validate with the rewards app's own rules; returns (normalised spec, versions, models)."""
    if reward_spec["shaping"] not in SHAPINGS:
        errors.setdefault("reward_spec", f"Reward shaping must be one of {', '.join(SHAPINGS)}.")
        return reward_spec, [], []
    if not reward_spec["components"]:
        return reward_spec, [], []  # GRPO refuses this in resolve_config (has_reward=False)
    try:
        reward_spec = reward_spec_validate(project=project, spec=reward_spec)
    except ApplicationError as exc:
        errors.setdefault("reward_spec", exc.message)
        return reward_spec, [], []
    ids = [c["version_id"] for c in reward_spec["components"] if c["type"] == "function"]
    versions = {v.pk: v for v in RewardVersion.objects.filter(pk__in=ids).select_related("function")}
    model_ids = [c["model_id"] for c in reward_spec["components"] if c["type"] == "model"]
    models = {m.pk: m for m in ModelEntry.objects.filter(pk__in=model_ids)}
    return reward_spec, [versions[i] for i in ids], [models[i] for i in model_ids]


def _check_probes(versions: list[RewardVersion], errors: dict, warnings: dict) -> None:
    """Failing or pending probes refuse the launch (webapp.rewards.probes); overridden ones warn."""
    refusals, notes = probe_gate(versions)
    if refusals:
        errors.setdefault("reward_spec", " ".join(refusals))
    if notes:
        warnings["reward_probes"] = " ".join(notes)


@lru_cache(maxsize=8)
def _tokenizer(path: str, mtime: float):
    from training.models import load_tokenizer

    return load_tokenizer(path)


def model_tokenizer(model: ModelEntry | None):
    """The local model's tokenizer (cached), or None for hub ids and unreadable folders."""
    if model is None or not model.path:
        return None
    try:
        return _tokenizer(model.path, os.path.getmtime(Path(model.path) / "config.json"))
    except Exception:  # noqa: BLE001 - a missing tokenizer means we count characters instead
        return None


def model_context_length(model: ModelEntry | None) -> int | None:
    """The longest sequence the local model takes (config.json's max_position_embeddings), or None."""
    if model is None or not model.path:
        return None
    try:
        config = json.loads((Path(model.path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _check_choices(project, kind: str, dataset_version: DatasetVersion | None, base_model: ModelEntry | None,
                   teacher_model: ModelEntry | None) -> dict[str, str]:
    """Errors of the chosen dataset version and models (present, in this project, of the right kind)."""
    errors: dict[str, str] = {}
    if dataset_version is None:
        errors["dataset_version"] = "Choose a dataset version."
    elif dataset_version.dataset.project_id != project.pk:
        errors["dataset_version"] = "That dataset version is not in this project."
    elif dataset_version.status != VersionStatus.READY:
        errors["dataset_version"] = f"{dataset_version} is {dataset_version.status}, not ready."
    if base_model is None:
        errors["base_model"] = "Choose a base model."
    elif base_model.project_id != project.pk:
        errors["base_model"] = "That model is not in this project."
    elif kind in ("grpo", "distill") and base_model.kind != ModelKind.CAUSAL_LM:
        errors["base_model"] = f"{base_model.name} is a reward model; a policy must be a causal LM."
    if kind == "distill" and teacher_model is not None:
        if teacher_model.project_id != project.pk:
            errors["teacher_model"] = "That model is not in this project."
        elif teacher_model.kind != ModelKind.CAUSAL_LM:
            errors["teacher_model"] = f"{teacher_model.name} is a reward model; a teacher must be a causal LM."
    return errors


def plan_job(*, project, kind: str, backend: str, preset: str, hp_overrides: dict | None,
             dataset_version: DatasetVersion | None, reward_spec: Any, base_model: ModelEntry | None,
             teacher_model: ModelEntry | None = None, include_unreviewed: bool = False,
             pinned: Pinned | None = None, base_config: dict | None = None, check_probes: bool = True) -> JobPlan:
    """Validate every input of a launch; errors are keyed by form field (see config.resolve_config).

    `base_config` (a job's stored config) replaces the preset as the starting point: used by
    resume, rollback and clone so that the job keeps its settings plus the given edits.
    `check_probes`: the reward versions' probes must pass (or be overridden); they run now when they have
    not run yet. Resume and rollback continue a job launched with those versions and skip it.
    """
    errors = _check_choices(project, kind, dataset_version, base_model, teacher_model)
    warnings_before: dict[str, str] = {}
    reward_spec = normalize_reward_spec(reward_spec)
    versions, models = [], []
    if kind == "reward_model":
        reward_spec = {"shaping": reward_spec["shaping"], "components": []}  # a reward model job trains one
    else:
        reward_spec, versions, models = _resolve_rewards(project, reward_spec, errors)
        if versions and check_probes:
            _check_probes(versions, errors, warnings_before)
    if pinned is None and "dataset_version" not in errors:
        pinned = select_rows(dataset_version, include_unreviewed)
    context: dict[str, Any] = {"has_reward": bool(versions or models) or bool(errors.get("reward_spec")),
                               "has_teacher": teacher_model is not None,
                               "model_is_hub": bool(base_model and not base_model.path),
                               "model_context_length": model_context_length(base_model)}
    if pinned is not None:
        counts = pinned.manifest["counts"]
        context.update(dataset_kind=pinned.manifest["dataset"]["kind"], n_train_rows=counts["train"],
                       n_val_rows=counts["val"])
    config, cfg_errors, warnings = cfg.resolve_config(kind, preset, hp_overrides, backend=backend, context=context,
                                                      base=base_config)
    lengths = None
    if not any(k in cfg_errors for k in LENGTH_SETTINGS):  # handed the three limits only, not the settings
        lengths = length_preflight(pinned=pinned, model=base_model,
                                   limits={k: config["hp"][k] for k in LENGTH_SETTINGS},
                                   tokenizer=model_tokenizer(base_model), context=model_context_length(base_model))
        preflight_check(lengths, config["hp"].get("overlong_prompt_warn", 0.05), cfg_errors, warnings)
    held_out = (config.get("human_eval") or {}).get("dataset_version")
    if held_out and "human_eval" not in cfg_errors and not DatasetVersion.objects.filter(
            pk=held_out, dataset__project=project, status=VersionStatus.READY).exists():
        cfg_errors["human_eval"] = "Human evaluation schedule: choose a ready dataset version of this project."
    for key, message in cfg_errors.items():
        errors.setdefault(key, message)
    warnings = {**warnings_before, **warnings}
    return JobPlan(project=project, kind=kind, backend=backend, preset=preset, config=config, errors=errors,
                   warnings=warnings, reward_spec=reward_spec, dataset_version=dataset_version, base_model=base_model,
                   teacher_model=teacher_model if kind == "distill" else None,
                   include_unreviewed=bool(include_unreviewed), reward_versions=versions, reward_models=models,
                   pinned=pinned, lengths=lengths)


class JobValidationError(ApplicationError):
    """Several field errors at once; `message`/`field` hold the first for single-error callers."""

    def __init__(self, errors: dict[str, str], warnings: dict[str, str] | None = None):
        field, message = next(iter(errors.items()))
        super().__init__(message, field)
        self.errors = errors
        self.warnings = warnings or {}


class AlreadyLaunched(ApplicationError):
    """This reviewed launch (its launch token) already made a job: a second POST finds it, never a duplicate."""

    def __init__(self, job: Job):
        super().__init__(f"This configuration was already launched as job #{job.pk}.", "launch_token")
        self.job = job


def job_queue(backend: str, hp: dict) -> str:
    """Celery queue: `gpu` for an explicit cuda device or VERL (unless on cpu), else `cpu`."""
    device = hp.get("device")
    return "gpu" if device == "cuda" or (backend == "verl" and device != "cpu") else "cpu"


def _total_steps(config: dict, n_train: int) -> int | None:
    hp = config["hp"]
    if hp.get("max_steps"):
        return int(hp["max_steps"])
    if n_train and hp.get("batch_size"):
        return max(1, n_train // min(hp["batch_size"], n_train)) * int(hp.get("epochs", 1))
    return None


def insert_job(*, plan: JobPlan, user, name: str | None, parent: Job | None, resume_checkpoint: Checkpoint | None,
               reason: str, manifest: dict, launch_token: uuid.UUID | None = None) -> Job:
    """The job row of a valid plan, its first attempt queued and its launch enqueued when the transaction commits
    (for `job_create` and a rollback's `launch.job_create_child`)."""
    config = dict(plan.config)
    config["total_steps"] = _total_steps(plan.config, manifest.get("counts", {}).get("train", 0))
    config["include_unreviewed"] = plan.include_unreviewed
    job = Job.objects.create(
        project=plan.project, kind=plan.kind, backend=plan.backend, preset=plan.preset, config=config,
        name=(name or "").strip()[:200] or f"{plan.kind} · {plan.base_model.name} · {plan.preset}",
        base_model=plan.base_model, teacher_model=plan.teacher_model, dataset_version=plan.dataset_version,
        reward_spec=plan.reward_spec, data_manifest=manifest, parent=parent, resume_checkpoint=resume_checkpoint,
        queue=job_queue(plan.backend, plan.config["hp"]), created_by=user, launch_token=launch_token)
    job.reward_versions.set(plan.reward_versions)
    resume_from = resume_checkpoint.path if resume_checkpoint else ""
    JobAttempt.objects.create(job=job, number=1, reason=reason, resume_from=resume_from, state=JobState.QUEUED)
    record_event(job.pk, "state", f"queued ({reason})", actor=user, state=JobState.QUEUED, warnings=plan.warnings)
    transaction.on_commit(lambda: events.enqueue_launch(job.pk, job.queue))
    return job


def _with_lengths(plan: JobPlan) -> dict:
    """The pinned rows' manifest with the launch's length pre-flight, which the run page shows."""
    return {**plan.pinned.manifest, **({"lengths": plan.lengths} if plan.lengths else {})}


def launched_job(project, launch_token: uuid.UUID | None) -> Job | None:
    """The job a reviewed launch already made, if any."""
    return Job.objects.filter(project=project, launch_token=launch_token).first() if launch_token else None


def job_create(*, user, plan: JobPlan | None = None, name: str | None = None, parent: Job | None = None,
               resume_checkpoint: Checkpoint | None = None, reason: str = "start",
               launch_token: uuid.UUID | None = None, **inputs: Any) -> Job:
    """Save a planned job (pinned data manifest, reward versions) and enqueue its launch.

    `plan` comes from `plan_job`; callers with only the launch inputs (project, kind, backend, preset,
    hp_overrides, dataset_version, reward_spec, base_model, teacher_model, include_unreviewed) pass
    those instead and the job is planned here. Nothing is written to disk: the worker that launches
    the job writes its run directory. Raises JobValidationError (an ApplicationError) with every error.
    `launch_token` makes the launch happen once: the same token again raises AlreadyLaunched with the job
    (the unique column settles two requests at once).
    """
    done = launched_job(plan.project if plan else inputs.get("project"), launch_token)
    if done is not None:
        raise AlreadyLaunched(done)
    if plan is None:
        plan = plan_job(**inputs)
    errors = dict(plan.errors)
    if resume_checkpoint is not None and resume_checkpoint.job.project_id != plan.project.pk:
        errors.setdefault("resume_checkpoint", "That checkpoint is not in this project.")
    if errors:
        raise JobValidationError(errors, plan.warnings)
    # Planning (a tokenizer load, the data manifest) stays outside the transaction: on SQLite a
    # transaction holds the database's write lock from its start, and every other writer waits.
    try:
        with transaction.atomic():
            job = insert_job(plan=plan, user=user, name=name, parent=parent, resume_checkpoint=resume_checkpoint,
                             reason=reason, manifest=_with_lengths(plan), launch_token=launch_token)
            audit(actor=user, action="job.create", project=plan.project, obj=job,
                  summary=f"Launched {job.kind} job {job.name} ({job.backend}, preset {job.preset})",
                  after={"config": job.config, "reward_spec": job.reward_spec,
                         "dataset_version": plan.dataset_version.pk, "warnings": plan.warnings})
    except IntegrityError:
        done = launched_job(plan.project, launch_token)
        if done is None:
            raise
        raise AlreadyLaunched(done) from None
    return job


def plan_or_create(*, launch_as=None, name: str | None = None, launch_token: uuid.UUID | None = None,
                   **inputs: Any) -> tuple[JobPlan, Job | None]:
    """Plan a new job and, with `launch_as` (the user launching it) and no error, save it (`job_create`): the
    New job form's review and its Launch in one call. Raises AlreadyLaunched as `job_create` does."""
    plan = plan_job(**inputs)
    if launch_as is None or not plan.ok:
        return plan, None
    return plan, job_create(user=launch_as, plan=plan, name=name, launch_token=launch_token)
