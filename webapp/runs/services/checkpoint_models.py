"""Registering a checkpoint of a run as a model in the registry."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from training.checkpoints import export_hf
from webapp.core.services import ApplicationError
from webapp.registry.models import ModelEntry
from webapp.registry.services import model_register
from webapp.runs.models import CheckpointStatus


def model_register_from_checkpoint(*, checkpoint, user, name: str, description: str = "") -> ModelEntry:
    """Copy a local-backend checkpoint's weights into MODELS_ROOT (LoRA merged) and register them.

    The copy outlives checkpoint retention. VERL checkpoints need VERL's merger first (the checkpoints
    table's export); their run folders are not registrable by path.
    """
    job = checkpoint.job
    if checkpoint.status != CheckpointStatus.AVAILABLE or not Path(checkpoint.path).is_dir():
        raise ApplicationError(f"The checkpoint at step {checkpoint.step} is no longer on disk.", field="step")
    if not (Path(checkpoint.path) / "model").is_dir():
        raise ApplicationError("This is not a local-backend checkpoint: download its Hugging Face export from the "
                               "checkpoint table instead.", field="step")
    name = (name or "").strip() or f"job{job.pk}-step{checkpoint.step}"
    if ModelEntry.objects.filter(project=job.project, name=name).exists():
        raise ApplicationError(f"A model named {name!r} is already registered.", field="name")
    out = Path(settings.MODELS_ROOT) / job.project.slug / f"job{job.pk}-step{checkpoint.step}"
    if not (out / "config.json").exists():
        try:
            export_hf(checkpoint.path, out, merge_lora=True,
                      base_model_path=job.base_model.path if job.base_model and job.base_model.path else None)
        except (OSError, RuntimeError, ValueError) as exc:
            raise ApplicationError(f"Exporting the checkpoint failed: {exc}", field="step") from None
    entry = model_register(project=job.project, user=user, name=name, path=str(out), built_here=True,
                           description=description or f"{job.get_kind_display()} job #{job.pk}, step {checkpoint.step}")
    ModelEntry.objects.filter(pk=entry.pk).update(source_job=job)
    entry.source_job = job
    return entry
