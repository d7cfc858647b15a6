"""The launch review's zero-signal check: can this GRPO run learn at all?

Before a GRPO job starts, a worker samples the job's group of responses for a few of its own prompts from its
base model and scores them with the job's whole reward, through the zero-signal dry run
(`services/zero_signal.py`, `python -m training.zero_signal`). A group whose samples all score the same gives
GRPO no advantage; when most groups tie, the run would draw a flat curve, and the review says so with the
model's answers and their scores. The same review shown again (Back, Edit) reuses the finished check.
"""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from webapp.core.audit import audit
from webapp.core.queue import ZERO_SIGNAL, enqueue
from webapp.datasets.models import DatasetRow
from webapp.runs.models import ZeroSignalRun, ZeroSignalStatus
from webapp.runs.services.data import expand_ranges

PROMPTS = 4  # prompts sampled: with the group size, a few groups in seconds to a minute on CPU
MAX_TOKENS = 256  # responses are cut here even when the job allows longer ones (a quick look)
WARN_AT = 0.5  # the review warns when at least this share of the groups tie
REUSE_FOR = timedelta(hours=12)
ORIGIN = "launch review"


def check_params(plan) -> dict[str, Any] | None:
    """What the check samples and scores for this plan; None when it does not apply (not GRPO, a reward
    model in the reward, a model with no local folder, no training rows)."""
    if plan.kind != "grpo" or not plan.ok or plan.reward_models or not plan.reward_versions:
        return None
    model = plan.base_model
    if model is None or not model.path or not Path(model.path).is_dir() or plan.pinned is None:
        return None
    rows = _sample_rows(plan.pinned)
    if not rows:
        return None
    hp = plan.config["hp"]
    spec = {"shaping": plan.reward_spec.get("shaping") or "raw",
            "components": [{"type": "function", "version_id": c["version_id"], "weight": float(c.get("weight", 1.0))}
                           for c in plan.reward_spec["components"] if c.get("type") == "function"]}
    return json.loads(json.dumps({
        "origin": ORIGIN, "group_size": int(hp.get("group_size") or 4), "max_prompts": len(rows),
        "batch_prompts": len(rows),
        "max_response_length": max(1, min(int(hp.get("max_response_length") or 64), MAX_TOKENS)),
        "temperature": float(hp.get("temperature") or 1.0), "seed": int(hp.get("seed") or 0),
        "rows": rows, "reward_spec": spec}, default=str))


def _sample_rows(pinned) -> list[dict[str, Any]]:
    """PROMPTS training rows spread over the pinned ones (edits applied), each with its row index in the version."""
    splits = pinned.splits or ["train"] * len(pinned.rows)
    train = [i for i, split in enumerate(splits) if split != "val"] or list(range(len(pinned.rows)))
    chosen = train[::max(1, len(train) // PROMPTS)][:PROMPTS]
    ids = expand_ranges(pinned.manifest.get("included_ranges") or [])  # the pinned rows' ids, in row order
    index = dict(DatasetRow.objects.filter(pk__in=[ids[i] for i in chosen if i < len(ids)])
                 .values_list("pk", "index")) if len(ids) == len(pinned.rows) else {}
    return [{"index": index.get(ids[i], i) if index else i,
             **{k: pinned.rows[i].get(k) for k in ("prompt", "ground_truth", "data_source", "extra_info")}}
            for i in chosen]


def prelaunch_check(*, plan, user) -> ZeroSignalRun | None:
    """The check for this plan: the same one already queued, running or done, else a new one queued for a
    worker. None when it does not apply."""
    params = check_params(plan)
    if params is None:
        return None
    recent = ZeroSignalRun.objects.filter(
        version=plan.dataset_version, model=plan.base_model, created_at__gte=timezone.now() - REUSE_FOR,
        status__in=(ZeroSignalStatus.QUEUED, ZeroSignalStatus.RUNNING, ZeroSignalStatus.SUCCEEDED))
    for run in recent[:20]:
        if run.params == params:
            return run
    with transaction.atomic():
        run = ZeroSignalRun.objects.create(version=plan.dataset_version, model=plan.base_model,
                                           reward_version=plan.reward_versions[0], params=params,
                                           created_by=user if getattr(user, "pk", None) else None)
        audit(actor=user, action="dataset.zero_signal", project=plan.project, obj=plan.dataset_version,
              summary=f"The launch review checks whether {plan.base_model.name}'s answers to {len(params['rows'])} "
                      f"prompts of {plan.dataset_version} score differently ({params['group_size']} samples each)",
              after={"run": run.pk, "origin": ORIGIN})
        transaction.on_commit(lambda: enqueue(ZERO_SIGNAL, run.pk))
    return run


def verdict(run: ZeroSignalRun) -> dict[str, Any]:
    """What the review shows of a check: its state, the share of tied groups, whether to warn, the answers."""
    r = run.result or {}
    share = r.get("tied_share")
    return {"run": run, "finished": run.finished, "status": run.status, "progress": run.progress, "error": run.error,
            "group_size": run.params.get("group_size"), "prompts": len(run.params.get("rows") or []),
            "tied": r.get("tied"),
            "counted": r.get("counted"), "share": share, "all_right": r.get("all_right"),
            "all_wrong": r.get("all_wrong"), "warn": share is not None and share >= WARN_AT,
            "warn_at": WARN_AT, "answers": r.get("answers", []), "seconds": r.get("seconds"),
            "max_response_length": run.params.get("max_response_length")}
