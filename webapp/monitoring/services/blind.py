"""Blind pairwise judging, the one place for sides and secrets: which side a reviewer sees on the left, who may
judge, recording a verdict, identical pairs, opening and closing a task, and what a page may show while it is open.

Each pair holds a secret drawn with `secrets` when it is stored (`BlindPair.order_key`). A reviewer's left side
is the first bit of HMAC-SHA256(that secret, the reviewer's id): random per pair and reviewer, the same on every
visit, and unpredictable from anything a reviewer can see (ids, seeds, indexes). No page or API shows the secret.
While a task is open nobody sees its results: a verdict must not move a number a reviewer can read. Engineers
(who close tasks) see progress counts — how many pairs each reviewer has judged — which say nothing of the sides.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone

from webapp.core.access import user_role
from webapp.core.audit import audit
from webapp.core.models import ROLE_RANK, Role
from webapp.core.services import ApplicationError
from webapp.monitoring.models import BlindPair, BlindSource, BlindTask, BlindVerdict, EvaluationStatus
from webapp.monitoring.services.gap import gap_check

CHOICES = ("left", "right", "tie", "both_bad")  # what a reviewer presses
OUTCOME = {"b": 1.0, "tie": 0.5, "both_bad": 0.5, "a": 0.0}  # a verdict from B's side (ties and both bad: ½)
OTHER = {"a": "b", "b": "a"}


# -- pairs: identical responses and the secret ------------------------------------------------------------

def normalised(text: str | None) -> str:
    """A response as compared for identity: whitespace runs collapsed, ends stripped."""
    return " ".join((text or "").split())


def is_identical(a: str | None, b: str | None) -> bool:
    return normalised(a) == normalised(b)


def new_pair(task: BlindTask, index: int, *, response_a: str, response_b: str, **fields: Any) -> BlindPair:
    """An unsaved pair with its identity flag and a fresh secret (every pair is made here)."""
    return BlindPair(task=task, index=index, response_a=response_a, response_b=response_b,
                     identical=is_identical(response_a, response_b), order_key=secrets.token_hex(16), **fields)


def left_side(pair: BlindPair, reviewer) -> str:
    """The side shown on the left to this reviewer ("a" or "b")."""
    digest = hmac.new(pair.order_key.encode(), str(reviewer.pk).encode(), hashlib.sha256).digest()
    return "a" if digest[0] & 1 == 0 else "b"


def shown(pair: BlindPair, reviewer) -> dict[str, Any]:
    """What the judging screen shows this reviewer: the two texts in their order, and the verdict they gave
    (as the key they pressed), never which side is which."""
    left = left_side(pair, reviewer)
    right = OTHER[left]
    verdict = pair.verdicts.filter(reviewer=reviewer).first()
    pressed = ""
    if verdict is not None:
        pressed = {left: "left", right: "right"}.get(verdict.choice, verdict.choice)
    return {"left_text": pair.response(left), "right_text": pair.response(right),
            "left_cut": pair.truncated(left), "right_cut": pair.truncated(right), "pressed": pressed}


# -- who may judge, and what is left to judge ---------------------------------------------------------------

def assignment_text(task: BlindTask) -> str:
    if task.anyone_may_judge:
        return "Anyone in the project who may review can judge it."
    names = ", ".join(sorted(u.username for u in task.assignees.all()))
    return f"Assigned to {names}." if names else "Assigned to nobody yet: an engineer assigns reviewers."


def judge_refusal(task: BlindTask, user) -> str | None:
    """Why this user cannot judge the task now (None when they can)."""
    role = user_role(user, task.project)
    if role is None or ROLE_RANK[role] < ROLE_RANK[Role.REVIEWER]:
        return "Judging needs the reviewer role in this project."
    if task.status != EvaluationStatus.SUCCEEDED:
        return "This task has no responses to judge yet."
    if not task.is_open:
        return "This task is closed."
    if not task.anyone_may_judge and not task.assignees.filter(pk=user.pk).exists():
        return "This task is assigned to other reviewers: only they may judge it."
    return None


def judgeable(task: BlindTask):
    """The pairs people judge: identical ones are ties already."""
    return task.pairs.filter(identical=False)


def next_pair_for(task: BlindTask, reviewer) -> BlindPair | None:
    return judgeable(task).exclude(verdicts__reviewer=reviewer).order_by("index").first()


def progress_of(task: BlindTask, reviewer) -> tuple[int, int]:
    """(pairs this reviewer has judged, pairs to judge)."""
    pairs = judgeable(task)
    return pairs.filter(verdicts__reviewer=reviewer).count(), pairs.count()


def progress_counts(task: BlindTask) -> dict[str, Any]:
    """For engineers while a task is open: how far judging has come, per reviewer; no outcomes."""
    pairs = judgeable(task)
    total = pairs.count()
    per: dict[str, int] = {}
    for name in BlindVerdict.objects.filter(pair__task=task, pair__identical=False) \
            .values_list("reviewer__username", flat=True):
        per[name] = per.get(name, 0) + 1
    return {"pairs": total, "judged_pairs": pairs.filter(verdicts__isnull=False).distinct().count(),
            "identical": task.pairs.filter(identical=True).count(),
            "reviewers": [{"reviewer": n, "judged": k} for n, k in sorted(per.items())]}


# -- verdicts, closing, assignment --------------------------------------------------------------------------

@transaction.atomic
def verdict_record(*, pair: BlindPair, reviewer, choice: str) -> BlindVerdict:
    """Record (or change) a reviewer's verdict; `choice` is what they pressed: left, right, tie or both_bad."""
    if choice not in CHOICES:
        raise ApplicationError(f"Choose one of {', '.join(CHOICES)}, not '{choice}'.", field="choice")
    task = BlindTask.objects.select_for_update().get(pk=pair.task_id)
    refusal = judge_refusal(task, reviewer)
    if refusal:
        raise ApplicationError(refusal)
    if pair.identical:
        raise ApplicationError("Both responses are the same text: the pair is recorded as a tie, nothing to judge.")
    left = left_side(pair, reviewer)
    side = {"left": left, "right": OTHER[left]}.get(choice, choice)
    previous = BlindVerdict.objects.filter(pair=pair, reviewer=reviewer).first()
    verdict, _ = BlindVerdict.objects.update_or_create(pair=pair, reviewer=reviewer,
                                                       defaults={"choice": side, "shown_left": left})
    # the audit log (engineers read it) names the key pressed, never the side: it must not unblind an open task
    audit(actor=reviewer, action="blind.judge", project=task.project, obj=verdict,
          summary=f"{task.get_source_display()} #{task.pk} pair {pair.index + 1}: judged ({choice})",
          before={"changed": True} if previous else None, after={"pressed": choice})
    if _everyone_assigned_is_done(task):
        task_set_open(task=task, user=None, is_open=False, reason="every assigned reviewer judged every pair")
    return verdict


def _everyone_assigned_is_done(task: BlindTask) -> bool:
    """An assigned task closes itself once each assignee has judged every pair (its results then show)."""
    if task.anyone_may_judge:
        return False
    people = list(task.assignees.values_list("pk", flat=True))
    total = judgeable(task).count()
    if not people or not total:
        return False
    done = BlindVerdict.objects.filter(pair__task=task, pair__identical=False, reviewer_id__in=people).count()
    return done >= total * len(people)


@transaction.atomic
def task_set_open(*, task: BlindTask, user, is_open: bool, reason: str = "") -> BlindTask:
    """Open or close a task. Closing shows its results and (periodic tasks) checks the reward-vs-human gap."""
    task.is_open = is_open
    task.closed_at = None if is_open else timezone.now()
    task.save(update_fields=["is_open", "closed_at", "updated_at"])
    what = f"{task.get_source_display()} #{task.pk}"
    audit(actor=user, action="blind.open" if is_open else "blind.close", project=task.project, obj=task,
          summary=f"{'Reopened' if is_open else 'Closed'} {what}{f': {reason}' if reason else ''}")
    if not is_open and task.source == BlindSource.PERIODIC:
        gap_check(task)
    return task


@transaction.atomic
def task_assign(*, task: BlindTask, user, anyone: bool, assignees: list) -> BlindTask:
    """Who may judge: `anyone` who may review in the project, or exactly `assignees` (reviewers or above)."""
    allowed = [u for u in assignees if (user_role(u, task.project) is not None
                                        and ROLE_RANK[user_role(u, task.project)] >= ROLE_RANK[Role.REVIEWER])]
    if len(allowed) != len(assignees):
        raise ApplicationError("Only members who may review can be assigned.", field="assignees")
    if not anyone and not allowed:
        raise ApplicationError("Assign at least one reviewer, or let anyone who may review judge it.",
                               field="assignees")
    before = {"anyone": task.anyone_may_judge, "assignees": sorted(u.username for u in task.assignees.all())}
    task.anyone_may_judge = anyone
    task.save(update_fields=["anyone_may_judge", "updated_at"])
    task.assignees.set(allowed)
    audit(actor=user, action="blind.assign", project=task.project, obj=task,
          summary=f"Who may judge {task.get_source_display()} #{task.pk}: {assignment_text(task)}",
          before=before, after={"anyone": anyone, "assignees": sorted(u.username for u in allowed)})
    return task
