"""Turn names (CLI / API) into launch inputs, and dry runs that create nothing."""
from __future__ import annotations

from django.db.models import Max

from webapp.core.services import ApplicationError
from webapp.runs import selectors
from webapp.runs.models import Job
from webapp.runs.services import config as cfg
from webapp.runs.services.launch import JobValidationError
from webapp.runs.services.presets import DEFAULT_PRESET
from webapp.runs.services.spec import build_spec, dry_run_text, plan_job, run_dir_for


def resolve_inputs(project, data: dict) -> dict:
    """Shared by the API and `manage.py launch_job`: names -> objects, with defaults for the demo."""
    kind = data["kind"]
    dataset_version = selectors.dataset_version_by_ref(project=project, ref=data.get("dataset"), kind=kind)
    base = selectors.model_by_ref(project=project, ref=data.get("model")) if data.get("model") else \
        selectors.default_base_model(project=project, kind=kind)
    if base is None:
        raise ApplicationError("Choose a base model (model=NAME); see the Models page.", field="base_model")
    teacher = None
    if kind == "distill":
        teacher = selectors.model_by_ref(project=project, ref=data.get("teacher"), field="teacher_model",
                                         default_names=("demo-teacher",))
    if data.get("reward_spec"):
        reward_spec = data["reward_spec"]
    elif data.get("reward"):
        reward_spec = {"shaping": data.get("shaping") or "raw",
                       "components": [selectors.reward_component_by_ref(project=project, ref=r)
                                      for r in data["reward"]]}
    else:
        reward_spec = selectors.default_reward_spec(project=project, kind=kind)
    if data.get("shaping") and isinstance(reward_spec, dict):
        reward_spec = {**reward_spec, "shaping": data["shaping"]}
    return {"kind": kind, "backend": data.get("backend", "local"), "preset": data.get("preset", DEFAULT_PRESET),
            "hp_overrides": dict(data.get("set") or {}), "dataset_version": dataset_version,
            "reward_spec": reward_spec, "base_model": base, "teacher_model": teacher,
            "include_unreviewed": bool(data.get("include_unreviewed"))}


def dry_run(project, inputs: dict) -> dict:
    """Validate and render without creating anything: config YAML, run dir, exact command."""
    plan = plan_job(project=project, **inputs)
    if plan.errors:
        raise JobValidationError(plan.errors, plan.warnings)
    next_id = (Job.objects.aggregate(n=Max("id"))["n"] or 0) + 1
    run_dir = run_dir_for(project, next_id)
    spec = build_spec(job_id=next_id, kind=plan.kind, backend=plan.backend, config=plan.config,
                      base_model=inputs["base_model"], teacher_model=inputs["teacher_model"],
                      reward_spec=plan.reward_spec, versions=plan.reward_versions, models=plan.reward_models,
                      has_val=bool(plan.pinned.manifest["counts"]["val"]))
    return {"run_dir": str(run_dir), "config_yaml": cfg.to_yaml(spec), "command": dry_run_text(spec, run_dir),
            "warnings": plan.warnings, "data": plan.pinned.manifest.get("counts")}
