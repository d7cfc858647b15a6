"""The arena: two checkpoints (or a checkpoint and a registered model) answer the same prompts in a blind task
(source "arena"); reviewers judge the pairs blind (services/blind.py); each decisive verdict can become a
preference pair in a new dataset version (arena_export.py).

Generation runs on a worker (`jobs.tasks.generate_arena`, sent by name), as for every blind task
(services/generation.py). Prompts taken from a dataset keep what a reward needs to score their answers (ground
truth, data source, extra info).
"""
from __future__ import annotations

import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone

from training.arena import SAMPLING_DEFAULTS
from webapp.core.audit import audit
from webapp.core.queue import GENERATE_ARENA, enqueue
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.models import DatasetRow, DatasetVersion, VersionStatus
from webapp.monitoring.models import BlindPair, BlindSource, BlindTask, EvaluationStatus
from webapp.monitoring.services.generation import GENERATION_TIMEOUT_S, generate
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import Checkpoint, CheckpointStatus, JobKind
from webapp.runs.selectors import checkpoint_on_disk
from webapp.runs.services.data import to_record

MAX_PROMPTS = 500
MAX_RESPONSE_LENGTH = 4096


# --- sides and prompts -------------------------------------------------------------------------------------

def side_choices(project) -> list[tuple[str, str]]:
    """(value, label) of every side an arena can use: checkpoints on disk, then registered causal LMs."""
    out = []
    ckpts = Checkpoint.objects.filter(job__project=project, status=CheckpointStatus.AVAILABLE) \
        .exclude(job__kind=JobKind.REWARD_MODEL).select_related("job").order_by("-job_id", "-step")[:300]
    out += [(f"ckpt:{c.pk}", f"Run #{c.job_id} {c.job.name} · step {c.step}") for c in ckpts]
    models = ModelEntry.objects.filter(project=project, kind=ModelKind.CAUSAL_LM).exclude(path="")
    out += [(f"model:{m.pk}", f"{m.name} (registered model)") for m in models]
    return out


def side_parse(project, ref: str, field: str) -> dict[str, Any]:
    """The provenance snapshot of a side given as 'ckpt:<id>' or 'model:<id>'."""
    kind, _, pk = (ref or "").partition(":")
    if kind not in ("ckpt", "model") or not pk.isdigit():
        raise ApplicationError("Choose a checkpoint or a registered model.", field=field)
    if kind == "ckpt":
        ckpt = Checkpoint.objects.select_related("job__base_model").filter(pk=int(pk), job__project=project).first()
        if ckpt is None:
            raise ApplicationError("That checkpoint is not in this project.", field=field)
        if ckpt.job.kind == JobKind.REWARD_MODEL:
            raise ApplicationError("A reward model's checkpoint writes no responses.", field=field)
        if not checkpoint_on_disk(ckpt):
            raise ApplicationError(f"The checkpoint at step {ckpt.step} is no longer on disk.", field=field)
        base = ckpt.job.base_model
        return {"kind": "checkpoint", "label": f"Run #{ckpt.job_id} {ckpt.job.name} · step {ckpt.step}",
                "checkpoint": ckpt.pk, "job": ckpt.job_id, "step": ckpt.step, "path": ckpt.path,
                "base_model": base.path if base and base.path else None, "base_model_name": base.name if base else ""}
    entry = ModelEntry.objects.filter(pk=int(pk), project=project).first()
    if entry is None:
        raise ApplicationError("That model is not in this project.", field=field)
    if entry.kind != ModelKind.CAUSAL_LM or not entry.path:
        raise ApplicationError(f"{entry.name} is not a causal LM on disk: it cannot answer prompts.", field=field)
    return {"kind": "model", "label": f"{entry.name} (registered model)", "model": entry.pk, "path": entry.path,
            "base_model": None}


def prompts_typed(text: str) -> list[str]:
    """One prompt per line; blank lines are skipped. A line may use \\n for a line break."""
    return [line.replace("\\n", "\n") for line in (text or "").splitlines() if line.strip()]


def prompts_from_version(project, version: DatasetVersion | None, split: str, limit: int) -> list[dict]:
    """The version's prompt rows as a run gets them (prompt, ground truth, data source, extra info)."""
    if version is None:
        raise ApplicationError("Choose a dataset version.", field="dataset_version")
    if version.dataset.project_id != project.pk:
        raise ApplicationError("That dataset version is not in this project.", field="dataset_version")
    if version.status != VersionStatus.READY:
        raise ApplicationError(f"{version} is {version.status}, not ready.", field="dataset_version")
    # a row without a prompt has neither its JSON nor its text (plain text has only the text: DatasetRow.prompt)
    rows = DatasetRow.objects.filter(version=version).exclude(prompt=None, prompt_text="").order_by("index")
    if split in ("train", "val"):
        rows = rows.filter(split=split)
    prompts = [prompt_row(to_record(r, version.dataset.kind)) for r in rows[:limit]]
    if not prompts:
        raise ApplicationError(f"{version} has no prompts in the {split} split.", field="dataset_version")
    return prompts


def clean_sampling(raw: dict[str, Any] | None) -> dict[str, Any]:
    unknown = sorted(set(raw or {}) - set(SAMPLING_DEFAULTS))
    if unknown:
        raise ApplicationError(f"Unknown sampling setting {', '.join(map(repr, unknown))}: use "
                               f"{', '.join(SAMPLING_DEFAULTS)}.", field="sampling")
    s = {**SAMPLING_DEFAULTS, **{k: v for k, v in (raw or {}).items() if v not in (None, "")}}
    try:
        out = {"max_response_length": int(s["max_response_length"]), "temperature": float(s["temperature"]),
               "top_p": float(s["top_p"])}
    except (TypeError, ValueError):
        raise ApplicationError("Sampling settings must be numbers.", field="sampling") from None
    if not 1 <= out["max_response_length"] <= MAX_RESPONSE_LENGTH:
        raise ApplicationError(f"Max response length must be between 1 and {MAX_RESPONSE_LENGTH} tokens.",
                               field="max_response_length")
    if not 0 <= out["temperature"] <= 5:
        raise ApplicationError("Temperature must be between 0 (greedy) and 5.", field="temperature")
    if not 0 < out["top_p"] <= 1:
        raise ApplicationError("Top-p must be more than 0 and at most 1.", field="top_p")
    return out


def prompt_row(value: Any) -> dict[str, Any]:
    """A prompt as an arena keeps it: {"prompt", "ground_truth", "data_source", "extra_info"}; a bare prompt
    (text or messages) has no ground truth."""
    row = value if isinstance(value, dict) and "prompt" in value else {"prompt": value}
    return {"prompt": row["prompt"], "ground_truth": row.get("ground_truth") if row.get("ground_truth") not in
            ("", None) else None, "data_source": str(row.get("data_source") or ""),
            "extra_info": row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}}


# --- create and generate -----------------------------------------------------------------------------------

def arena_create(*, project, user, side_a: str, side_b: str, prompts: list, sampling: dict | None = None,
                 seed: int | None = None, dataset_version: DatasetVersion | None = None, title: str = "",
                 assignees: list | None = None) -> BlindTask:
    """Validate everything, store the arena and queue its generation (nothing is stored on a refusal).
    Without `assignees` anyone in the project who may review can judge it (shown on the arena)."""
    a, b = side_parse(project, side_a, "side_a"), side_parse(project, side_b, "side_b")
    if side_a == side_b:
        raise ApplicationError("Choose two different sides.", field="side_b")
    if not prompts:
        raise ApplicationError("Give at least one prompt (type them, one per line, or pick a dataset).",
                               field="prompts")
    if len(prompts) > MAX_PROMPTS:
        raise ApplicationError(f"At most {MAX_PROMPTS} prompts per arena, not {len(prompts)}.", field="prompts")
    sampling = clean_sampling(sampling)
    if seed is None:
        seed = secrets.randbelow(2**31)
    elif not 0 <= int(seed) < 2**62:
        raise ApplicationError("The seed must be a whole number from 0.", field="seed")
    title = (title or "").strip()[:200] or f"{a['label']} vs {b['label']}"[:200]
    rows = [prompt_row(p) for p in prompts]
    origin = (f"{dataset_version} ({count(len(rows), 'prompt')})" if dataset_version
              else count(len(rows), "typed prompt"))
    with transaction.atomic():
        arena = BlindTask.objects.create(
            project=project, source=BlindSource.ARENA, title=title, created_by=user, sides={"a": a, "b": b},
            prompts=rows, origin=origin[:300], sampling=sampling, seed=int(seed), dataset_version=dataset_version,
            a_checkpoint_id=a.get("checkpoint"), a_model_id=a.get("model"),
            b_checkpoint_id=b.get("checkpoint"), b_model_id=b.get("model"), anyone_may_judge=not assignees)
        if assignees:
            arena.assignees.set(assignees)
        audit(actor=user, action="arena.create", project=project, obj=arena,
              summary=f"Started arena #{arena.pk}: {title} on {count(len(prompts), 'prompt')}",
              after={"sides": arena.sides, "sampling": sampling, "seed": arena.seed, "prompts": len(prompts)})
        queue_name = "gpu" if any(_side_queue(s) == "gpu" for s in (a, b)) else "cpu"
        transaction.on_commit(lambda: enqueue(GENERATE_ARENA, arena.pk, queue=queue_name))
    return arena


def _side_queue(side: dict) -> str:
    if side.get("checkpoint"):
        ckpt = Checkpoint.objects.select_related("job").filter(pk=side["checkpoint"]).first()
        return ckpt.job.queue if ckpt else "cpu"
    return "cpu"


def is_stalled(arena: BlindTask) -> bool:
    """Queued or generating for longer than a generation may take: its worker is gone."""
    since = arena.started_at or arena.created_at
    return arena.is_active and (timezone.now() - since).total_seconds() > GENERATION_TIMEOUT_S + 120


@transaction.atomic
def arena_retry(*, arena: BlindTask, user) -> BlindTask:
    """Generate a failed (or stalled) arena again, with the same prompts, settings and seed."""
    arena = BlindTask.objects.select_for_update().get(pk=arena.pk, source=BlindSource.ARENA)
    if arena.status != EvaluationStatus.FAILED and not is_stalled(arena):
        raise ApplicationError("Only a failed or stalled arena can be generated again.")
    BlindPair.objects.filter(task=arena).delete()
    arena.status, arena.error, arena.progress = EvaluationStatus.QUEUED, "", 0.0
    arena.started_at = arena.finished_at = None
    arena.save()
    audit(actor=user, action="arena.retry", project=arena.project, obj=arena,
          summary=f"Generating arena #{arena.pk} again")
    queue_name = "gpu" if any(_side_queue(s) == "gpu" for s in arena.sides.values()) else "cpu"
    transaction.on_commit(lambda: enqueue(GENERATE_ARENA, arena.pk, queue=queue_name))
    return arena


def arena_generate(*, arena_id: int) -> BlindTask:
    """Generate both sides on a worker (services/generation.py; idempotent)."""
    return generate(task_id=arena_id)[0]
