"""An arena's verdicts → a new preference dataset version, through the datasets import service.

Each verdict with a winner (A or B better) becomes one row: prompt, chosen = the winner's response,
rejected = the other's, and in extra_info its provenance: the arena, the pair, both sides (checkpoint,
run, step, model), the sampling settings, the seed and the reviewer. Ties and "both bad" are not
preferences, so they are not exported. Two reviewers who judged the same pair give two rows.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.models import DatasetVersion
from webapp.datasets.services import dataset_import
from webapp.monitoring.blind_results import pair_verdicts
from webapp.monitoring.models import BlindSource, BlindTask, BlindVerdict, EvaluationStatus

EXPORTED = ("a", "b")


def _side(side: dict[str, Any]) -> dict[str, Any]:
    keep = ("kind", "label", "checkpoint", "job", "step", "model", "path", "base_model_name")
    return {k: side.get(k) for k in keep if side.get(k) not in (None, "")}


def _response(prompt: Any, text: str) -> Any:
    # a chat prompt takes an assistant message, as the conversational preference format wants
    return [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text


def export_rows(arena: BlindTask, *, agreed_only: bool = False) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(the preference rows of the arena's decisive judgements in pair then reviewer order, what was left out).

    Left out besides ties and both-bad: a judgement whose responses are identical (no preference to learn)
    or where a response is empty (a dataset row needs both texts); with `agreed_only`, a judgement that
    differs from its pair's majority verdict (or whose pair's reviewers split evenly)."""
    rows: list[dict[str, Any]] = []
    skipped = {"empty": 0, "identical": 0, "disagreed": 0}
    verdicts = pair_verdicts(arena) if agreed_only else {}
    judgements = BlindVerdict.objects.filter(pair__task=arena, choice__in=EXPORTED) \
        .select_related("pair", "reviewer").order_by("pair__index", "reviewer__username")
    sides = {k: _side(v) for k, v in arena.sides.items()}
    for j in judgements:
        pair, winner = j.pair, j.choice
        loser = "b" if winner == "a" else "a"
        if not pair.response_a.strip() or not pair.response_b.strip():
            skipped["empty"] += 1
            continue
        if pair.identical:
            skipped["identical"] += 1
            continue
        if agreed_only and verdicts.get(pair.pk) != winner:
            skipped["disagreed"] += 1
            continue
        rows.append({
            "prompt": pair.prompt, "chosen": _response(pair.prompt, pair.response(winner)),
            "rejected": _response(pair.prompt, pair.response(loser)), "data_source": f"arena/{arena.pk}",
            "extra_info": {"arena": arena.pk, "pair": pair.index, "judgement": j.pk, "reviewer": j.reviewer.username,
                           "chosen_side": winner, "shown_left": j.shown_left, "seed": pair.seed,
                           "sampling": arena.sampling, "engine": arena.engine,
                           "chosen_model": sides.get(winner), "rejected_model": sides.get(loser),
                           "chosen_truncated": getattr(pair, f"truncated_{winner}"),
                           "rejected_truncated": getattr(pair, f"truncated_{loser}")}})
    return rows, skipped


def default_name(arena: BlindTask) -> str:
    return f"arena-{arena.pk}-preferences"


def arena_export(*, arena: BlindTask, user, name: str = "", split: str = "10%", agreed_only: bool = False
                 ) -> DatasetVersion:
    """A new version of dataset `name` (created if needed) holding the arena's decisive judgements."""
    if arena.source != BlindSource.ARENA or arena.status != EvaluationStatus.SUCCEEDED:
        raise ApplicationError("This arena has no judged pairs yet.")
    if arena.is_open:
        raise ApplicationError("Close the arena first: its verdicts stay blind while it is open.")
    rows, skipped = export_rows(arena, agreed_only=agreed_only)
    if not rows:
        raise ApplicationError("No judgement prefers one side with two different, non-empty responses: ties and "
                               "“both bad” are not exported as pairs.")
    name = (name or "").strip() or default_name(arena)
    with tempfile.TemporaryDirectory(prefix="arena-export-") as tmp:
        path = Path(tmp) / f"arena-{arena.pk}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        version = dataset_import(project=arena.project, user=user, name=name, path=path, kind="preference",
                                 split=split, split_seed=arena.seed % 2**31, filename=path.name)
    audit(actor=user, action="arena.export", project=arena.project, obj=arena,
          summary=f"Exported {count(len(rows), 'judgement')} of arena #{arena.pk} as {version}",
          after={"dataset_version": version.pk, "rows": len(rows), "skipped": skipped, "agreed_only": agreed_only})
    return version
