"""Reward function services: create, save immutable versions (checked first), reward specs.

Test-runs (which execute user code, in the sandbox only) live in webapp.rewards.scoring.
"""
from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from training.reward_mix import SHAPINGS
from webapp.core.audit import audit
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.analysis import normalize_source, source_sha256
from webapp.rewards.models import RewardFunction, RewardVersion
from webapp.rewards.probes import probe_run_request

SOURCE_MAX_CHARS = 200_000
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,99}$")
MSG_UNCHANGED = "The source is identical to version {n}; no new version was created."


class SourceError(ApplicationError):
    """A source that cannot be saved (syntax, signature); `lineno` marks the line in the editor."""

    def __init__(self, message: str, *, lineno: int | None = None, problems: list[dict] | None = None):
        super().__init__(message, field="source")
        self.lineno = lineno
        self.problems = problems or []


@dataclass
class SaveOutcome:
    version: RewardVersion
    created: bool
    warnings: list[dict] = field(default_factory=list)

    @property
    def message(self) -> str:
        if self.created:
            return f"Saved version {self.version.number}."
        return MSG_UNCHANGED.format(n=self.version.number)


def source_problems(source: str, entry_point: str = "compute_score") -> list[dict]:
    """Static check (ast only, nothing is executed): [{"lineno", "message", "severity"}]."""
    from training.sandbox import check_source

    return [{"lineno": p.lineno, "message": p.message, "severity": p.severity}
            for p in check_source(normalize_source(source), entry_point)]


def _check_entry_point(entry_point: str) -> str:
    entry_point = (entry_point or "").strip()
    if not entry_point.isidentifier() or keyword.iskeyword(entry_point):
        raise ApplicationError(f"'{entry_point}' is not a Python function name.", field="entry_point")
    return entry_point


def validate_source(source: str, entry_point: str) -> tuple[str, list[dict]]:
    """Return (normalised source, warnings) or raise SourceError naming the first failing line."""
    source = normalize_source(source or "")
    if not source.strip():
        raise SourceError("The source is empty: write a compute_score function or start from a template.")
    if len(source) > SOURCE_MAX_CHARS:
        raise SourceError(f"The source is longer than {SOURCE_MAX_CHARS:,} characters.")
    problems = source_problems(source, entry_point)
    errors = [p for p in problems if p["severity"] == "error"]
    if errors:
        first = errors[0]
        where = f"Line {first['lineno']}: " if first["lineno"] else ""
        raise SourceError(f"Not saved. {where}{first['message']}", lineno=first["lineno"], problems=problems)
    return source, [p for p in problems if p["severity"] != "error"]


def _check_name(project: Project, name: str, exclude_pk: int | None = None) -> str:
    name = (name or "").strip()
    if not NAME_RE.match(name):
        raise ApplicationError("Use 1-100 letters, digits, spaces, '.', '_' or '-' (starting with a letter or "
                               "digit).", field="name")
    taken = RewardFunction.objects.filter(project=project, name__iexact=name).exclude(pk=exclude_pk)
    if taken.exists():
        raise ApplicationError(f"A reward function named '{name}' already exists in this project.", field="name")
    return name


@transaction.atomic
def reward_function_create(*, project: Project, user, name: str, source: str, description: str = "",
                           message: str = "", entry_point: str = "compute_score") -> RewardFunction:
    name = _check_name(project, name)
    entry_point = _check_entry_point(entry_point)
    source, _ = validate_source(source, entry_point)
    function = RewardFunction.objects.create(project=project, name=name, description=description.strip(),
                                             created_by=user)
    version = RewardVersion.objects.create(function=function, number=1, source=source, entry_point=entry_point,
                                           sha256=source_sha256(source), message=(message or "Created")[:300],
                                           author=user)
    audit(actor=user, action="reward.create", project=project, obj=function,
          summary=f"Created reward function {name} (v1, {version.sha256[:12]})")
    probe_run_request(version=version, trigger="save", user=user)
    return function


@transaction.atomic
def reward_version_save(*, function: RewardFunction, user, source: str, message: str = "",
                        entry_point: str | None = None) -> SaveOutcome:
    """Save `source` as the next immutable version; identical to the latest version: nothing is created."""
    function = RewardFunction.objects.select_for_update().get(pk=function.pk)  # serialise version numbers
    latest = function.versions.order_by("-number").first()
    entry_point = _check_entry_point(entry_point or (latest.entry_point if latest else "compute_score"))
    source, warnings = validate_source(source, entry_point)
    sha = source_sha256(source)
    if latest is not None and latest.sha256 == sha and latest.entry_point == entry_point:
        return SaveOutcome(version=latest, created=False, warnings=warnings)
    number = (latest.number if latest else 0) + 1
    version = RewardVersion.objects.create(function=function, number=number, source=source, entry_point=entry_point,
                                           sha256=sha, message=(message or "").strip()[:300], author=user)
    function.save(update_fields=["updated_at"])
    audit(actor=user, action="reward.version", project=function.project, obj=version,
          summary=f"{function.name} v{number} ({sha[:12]}): {version.message}"[:500],
          before={"version": latest.number if latest else None, "sha256": latest.sha256 if latest else None},
          after={"version": number, "sha256": sha})
    probe_run_request(version=version, trigger="save", user=user)
    return SaveOutcome(version=version, created=True, warnings=warnings)


# ---- reward specs (what a job uses: function versions and reward models, weighted, shaped) -----------

def reward_spec_validate(*, project: Project, spec: Any) -> dict:
    """Return the normalised reward spec or raise ApplicationError saying what is wrong.

    {"shaping": "binary|normalized|raw",
     "components": [{"type": "function", "version_id": int, "weight": float},
                    {"type": "model", "model_id": int, "weight": float}]}
    """
    if not isinstance(spec, dict):
        raise ApplicationError("The reward spec must be an object with 'shaping' and 'components'.", field="reward")
    shaping = spec.get("shaping", "raw")
    if shaping not in SHAPINGS:
        raise ApplicationError(f"Unknown shaping '{shaping}'; use one of {', '.join(SHAPINGS)}.", field="shaping")
    components = spec.get("components")
    if not isinstance(components, list) or not components:
        raise ApplicationError("Choose at least one reward: a function version or a reward model.", field="reward")
    out, seen = [], set()
    for i, comp in enumerate(components, 1):
        if not isinstance(comp, dict):
            raise ApplicationError(f"Reward component {i} must be an object.", field="reward")
        weight = comp.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                or weight <= 0:
            raise ApplicationError(f"Reward component {i}: the weight must be a number above 0.", field="reward")
        kind = comp.get("type")
        if kind == "function":
            key = comp.get("version_id")
            ok = isinstance(key, int) and not isinstance(key, bool) and RewardVersion.objects.filter(
                pk=key, function__project=project).exists()
            if not ok:
                raise ApplicationError(f"Reward component {i}: no reward function version {key!r} in this project.",
                                       field="reward")
            entry = {"type": "function", "version_id": key, "weight": float(weight)}
        elif kind == "model":
            key = comp.get("model_id")
            ok = isinstance(key, int) and not isinstance(key, bool) and ModelEntry.objects.filter(
                pk=key, project=project, kind=ModelKind.REWARD_MODEL).exists()
            if not ok:
                raise ApplicationError(f"Reward component {i}: no reward model {key!r} in this project.",
                                       field="reward")
            entry = {"type": "model", "model_id": key, "weight": float(weight)}
        else:
            raise ApplicationError(f"Reward component {i}: type must be 'function' or 'model'.", field="reward")
        if (kind, key) in seen:
            raise ApplicationError(f"Reward component {i} repeats an earlier one.", field="reward")
        seen.add((kind, key))
        out.append(entry)
    return {"shaping": shaping, "components": out}


