"""Turn names (CLI / API) into launch inputs, and dry runs that create nothing."""
from __future__ import annotations

from training.presets import DEFAULT_PRESET
from webapp.core.services import ApplicationError
from webapp.runs import selectors
from webapp.runs.services.plan import JobPlan, JobValidationError, plan_job
from webapp.runs.services.spec import plan_preview, resolved_text


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


def plan_inputs(project, data: dict) -> JobPlan:
    """Names (API / CLI) -> the launch's plan, decided once; create and dry-run both start from it."""
    return plan_job(project=project, **resolve_inputs(project, data))


def dry_run(plan: JobPlan) -> dict:
    """What the plan would launch, creating nothing: config YAML, run dir, exact command, the length pre-flight."""
    if plan.errors:
        raise JobValidationError(plan.errors, plan.warnings)
    preview = plan_preview(plan)
    return {"run_dir": preview["run_dir"], "config_yaml": preview["yaml"],
            "command": preview["command"] + resolved_text(preview["resolved"]), "resolved": preview["resolved"],
            "warnings": plan.warnings, "data": preview["manifest"].get("counts"), "lengths": plan.lengths}
