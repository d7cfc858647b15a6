"""A job's job.json (docs/run-directory.md), built from database rows, and the previews of it a review shows.
The launch's validation (the plan) is `plan.py`."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Max

from training.jobconfig import to_yaml
from training.jobspec import JobSpec, write_spec
from webapp.registry.models import ModelEntry
from webapp.rewards.models import RewardVersion
from webapp.runs.models import Job
from webapp.runs.services.lengths import figure as lengths_figure

if TYPE_CHECKING:
    from webapp.runs.services.plan import JobPlan


def plan_preview(plan: JobPlan) -> dict[str, Any]:
    """What launching this (valid) plan would write and run: job.json as YAML, the exact command, the run
    dir, the data manifest, and the job id it would most likely get."""
    next_id = (Job.objects.aggregate(n=Max("id"))["n"] or 0) + 1
    run_dir = run_dir_for(plan.project, next_id)
    manifest = plan.pinned.manifest if plan.pinned else {}
    spec = build_spec(job_id=next_id, kind=plan.kind, backend=plan.backend, config=plan.config,
                      base_model=plan.base_model, teacher_model=plan.teacher_model, reward_spec=plan.reward_spec,
                      versions=plan.reward_versions, models=plan.reward_models,
                      has_val=bool(manifest.get("counts", {}).get("val")))
    command, resolved = backend_preview(spec, run_dir)
    return {"yaml": spec_yaml(spec, plan.config), "command": command, "resolved": resolved,
            "run_dir": str(run_dir), "job_id": next_id, "manifest": manifest, "lengths": plan.lengths,
            "lengths_figure": lengths_figure(plan.lengths) if plan.lengths else None}


# settings the web app carries out beside the trainer: in the job's config, not in job.json
WEB_APP_SETTINGS = ("human_eval",)


def spec_yaml(spec: dict[str, Any], config: dict[str, Any]) -> str:
    """job.json as YAML, then what the web app runs beside the trainer (periodic human evaluation), so that a
    review shows every setting of the job."""
    text = to_yaml(spec)
    extra = {k: config[k] for k in WEB_APP_SETTINGS if (config or {}).get(k)}
    if extra:
        text += "# run by the web app beside the trainer (not in job.json):\n" + to_yaml(extra)
    return text


def reward_filename(rv: RewardVersion) -> str:
    base = re.sub(r"[^A-Za-z0-9_]+", "_", rv.function.name).strip("_").lower() or "reward"
    return f"{base}_v{rv.number}.py"


def reward_block(reward_spec: dict, versions: dict[int, RewardVersion], models: dict[int, ModelEntry]) -> dict:
    """job.json's "reward": function sources become reward/<name>_v<N>.py inside the run dir."""
    comps = []
    for comp in reward_spec.get("components") or []:
        weight = float(comp.get("weight", 1.0))
        if comp.get("type") == "function" and comp.get("version_id") in versions:
            rv = versions[comp["version_id"]]
            comps.append({"type": "function", "path": f"reward/{reward_filename(rv)}", "name": rv.entry_point,
                          "weight": weight, "version_id": rv.pk, "sha256": rv.sha256})
        elif comp.get("type") == "model" and comp.get("model_id") in models:
            m = models[comp["model_id"]]
            comps.append({"type": "model", "path": m.location, "name": m.name, "weight": weight})
    return {"shaping": reward_spec.get("shaping", "binary"), "components": comps}


def sandbox_block() -> dict[str, Any]:
    return {"time_limit_s": settings.REWARD_TIME_LIMIT_S, "batch_time_limit_s": settings.REWARD_BATCH_TIME_LIMIT_S,
            "memory_mb": settings.REWARD_MEMORY_MB}


def _spec_dict(*, job_id: Any, kind: str, backend: str, config: dict, base_model: ModelEntry,
               teacher_model: ModelEntry | None, reward_spec: dict, versions: list[RewardVersion],
               models: list[ModelEntry], has_val: bool = True, resume_from: str | None = None) -> dict[str, Any]:
    """job.json's plain form, before `training.jobspec` types it."""
    hp = json.loads(json.dumps(config["hp"]))
    spec: dict[str, Any] = {
        "job_id": str(job_id), "kind": kind, "backend": backend,
        "model": {"path": base_model.location, "name": base_model.name},
        "data": {"train": "data/train.jsonl", **({"val": "data/val.jsonl"} if has_val else {})},
        "reward": reward_block(reward_spec, {v.pk: v for v in versions}, {m.pk: m for m in models}),
        "hp": hp,
    }
    if kind == "distill" and teacher_model is not None:
        spec["teacher"] = {"path": teacher_model.location, "name": teacher_model.name}
    if backend == "verl":
        spec["verl"] = dict(config.get("verl") or {})
    spec["resume_from"] = resume_from
    spec["sandbox"] = sandbox_block()
    return spec


def build_spec(**inputs: Any) -> dict[str, Any]:
    """The job.json of a job's inputs (`_spec_dict`'s keywords; with a placeholder id for the pre-launch preview),
    typed and versioned by `training.jobspec`: what both backends read."""
    return JobSpec.from_dict(_spec_dict(**inputs)).to_dict()


def _job_inputs(job: Job, resume_from: str | None, has_val: bool) -> dict[str, Any]:
    model_ids = [c.get("model_id") for c in (job.reward_spec or {}).get("components", []) if c.get("type") == "model"]
    return {"job_id": job.pk, "kind": job.kind, "backend": job.backend, "config": job.config,
            "base_model": job.base_model, "teacher_model": job.teacher_model, "reward_spec": job.reward_spec,
            "versions": list(job.reward_versions.select_related("function")),
            "models": list(ModelEntry.objects.filter(pk__in=model_ids)), "has_val": has_val, "resume_from": resume_from}


def job_spec(job: Job, resume_from: str | None = None, has_val: bool = True) -> dict[str, Any]:
    """The job.json a launch of `job` writes (typed), for its page."""
    return build_spec(**_job_inputs(job, resume_from, has_val))


def write_job_spec(job_id: int, run_dir: Path, *, resume_from: str | None, has_val: bool) -> Path:
    """Write a job's job.json into its run directory, built from the job's rows: the settings are read here, the one
    place of a launch that reads them (the worker's start never does), typed and written once by
    `training.jobspec`. The backend's `prepare` and the trainer read the file back."""
    job = Job.objects.select_related("base_model", "teacher_model").get(pk=job_id)
    return write_spec(run_dir, _spec_dict(**_job_inputs(job, resume_from, has_val)))


def run_dir_for(project, job_id: Any) -> Path:
    """Where a job's run directory will be, for previews: the run id in its name is drawn at launch."""
    return project.runs_root / f"{job_id}-{'x' * 12}"


def backend_preview(spec: dict[str, Any], run_dir: Path) -> tuple[str, list[dict[str, Any]]]:
    """The backend's exact command, and for VERL each setting's resolved key ("setting -> VERL key -> resolved
    value", composed as the launch will compose it); a refusal is a comment in the command."""
    from training.backends import BackendError, get_backend

    backend = get_backend(spec["backend"])
    if not hasattr(backend, "preview"):
        return dry_run_text(spec, run_dir), []
    try:
        text, rows = backend.preview(spec, run_dir)
    except BackendError as exc:
        return f"# run dir: {run_dir}\n# the backend refuses this job: {exc.message}\n", []
    return text, [r.as_dict() for r in rows]


def resolved_text(rows: list[dict[str, Any]]) -> str:
    """The resolved table as the dry run prints it (empty for the local backend)."""
    if not rows:
        return ""
    lines = ["# setting -> VERL key -> resolved value"]
    lines += [f"#   {r['setting']} ({r['form']}) -> {r['key']} -> {r['resolved']}" + (f"  [{r['note']}]" if r['note']
                                                                                    else "") for r in rows]
    return "\n".join(lines) + "\n"


def dry_run_text(spec: dict[str, Any], run_dir: Path) -> str:
    """The backend's exact command for this spec (VERL: one override per line); errors as a comment."""
    from training.backends import BackendError, get_backend

    try:
        return get_backend(spec["backend"]).dry_run(spec, run_dir)
    except BackendError as exc:
        return f"# run dir: {run_dir}\n# the backend refuses this job: {exc.message}\n"
