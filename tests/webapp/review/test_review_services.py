"""Review services: distribution, position-bias bookkeeping, consensus and conflicts, counters, audit."""
from __future__ import annotations

import io
import random
from collections import Counter, defaultdict

import pytest
from django.core.management import call_command

from webapp.core.models import AuditLog
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetRow
from webapp.review import services, tally
from webapp.review.models import (
    Assignment,
    PairAgreement,
    PairState,
    Review,
    ReviewerStats,
    VersionReviewStats,
    VoteProfile,
)

pytestmark = pytest.mark.django_db


def _next(version, user, overlap, after=None):
    return services.assignment_next(version=version, reviewer=user, overlap=overlap, after_index=after)


def _row(version, index):
    return DatasetRow.objects.get(version=version, index=index)


def test_ensure_pair_states_is_idempotent(version):
    stats = services.ensure_pair_states(version=version)
    assert stats.total == 8 and stats.n_unreviewed == 8
    again = services.ensure_pair_states(version=version)
    assert again.pk == stats.pk
    assert PairState.objects.filter(version=version).count() == 8
    assert sorted(PairState.objects.values_list("row_index", flat=True)) == list(range(8))


def test_ensure_pair_states_refuses_a_version_still_importing(project, make):
    importing = make(project, name="wip", status="importing")
    with pytest.raises(ApplicationError, match="not ready"):
        services.ensure_pair_states(version=importing)


@pytest.mark.parametrize("left_is_chosen", [True, False])
def test_left_right_choice_resolves_to_chosen_and_rejected(project, version, reviewer, left_is_chosen):
    services.ensure_pair_states(version=version)
    assignment = _next(version, reviewer, 1)
    # Pin the recorded orientation: the resolution must follow what was recorded, for both sides.
    Assignment.objects.filter(pk=assignment.pk).update(left_is_chosen=left_is_chosen)
    row = _row(version, assignment.row_index)
    review = services.review_submit(actor=reviewer, project=project, row=row, choice="left")
    # Left holds the chosen response when left_is_chosen: preferring it approves the pair as is;
    # otherwise left holds the rejected one and preferring it swaps the pair.
    assert review.left_is_chosen is left_is_chosen
    assert review.label == ("approve" if left_is_chosen else "swap")
    assert review.choice == "left"
    state = PairState.objects.get(pk=row.pk)
    assert state.state == "approved" and state.final_swap is (not left_is_chosen)
    # And the other side, on a second row.
    assignment2 = _next(version, reviewer, 1, after=assignment.row_index)
    Assignment.objects.filter(pk=assignment2.pk).update(left_is_chosen=left_is_chosen)
    review2 = services.review_submit(actor=reviewer, project=project, row=_row(version, assignment2.row_index),
                                     choice="right")
    assert review2.label == ("swap" if left_is_chosen else "approve")


def test_resolve_choice_table():
    assert tally.resolve_choice("left", True) == ("approve", False)
    assert tally.resolve_choice("left", False) == ("approve", True)
    assert tally.resolve_choice("right", True) == ("approve", True)
    assert tally.resolve_choice("right", False) == ("approve", False)
    assert tally.resolve_choice("swap", True) == ("approve", True)
    assert tally.resolve_choice("reject", False) == ("reject", False)
    with pytest.raises(ValueError, match="Unknown choice"):
        tally.resolve_choice("up", True)


def test_orientation_is_recorded_and_varies_across_rows(project, make, reviewer):
    version = make(project, name="many", rows=40)
    services.ensure_pair_states(version=version)
    sides = set()
    after = None
    for _ in range(40):
        a = _next(version, reviewer, 1, after)
        assert a.left_is_chosen == services.orientation(row_id=a.row_id, reviewer_id=reviewer.pk)
        sides.add(a.left_is_chosen)
        after = a.row_index
    assert sides == {True, False}


def test_overlap_two_distribution(project, version, reviewer, reviewer2, engineer):
    services.ensure_pair_states(version=version)
    a = _next(version, reviewer, 2)
    b = _next(version, reviewer2, 2)
    c = _next(version, engineer, 2)
    assert a.row_index == b.row_index == 0  # the second reviewer joins the started pair
    assert c.row_index == 1  # the third gets another pair
    # Keep claiming in turns until nothing is left: no pair ever gets more than 2 reviewers.
    cursors = {u.pk: None for u in (reviewer, reviewer2, engineer)}
    for _ in range(30):
        for user in (reviewer, reviewer2, engineer):
            got = _next(version, user, 2, cursors[user.pk])
            if got is not None:
                cursors[user.pk] = got.row_index
    per_row = Counter(Assignment.objects.filter(version=version).values_list("row_id", flat=True))
    assert set(per_row.values()) == {2} and len(per_row) == 8
    assert all(s.claims == 2 for s in PairState.objects.filter(version=version))
    for user in (reviewer, reviewer2, engineer):
        rows = list(Assignment.objects.filter(reviewer=user).values_list("row_id", flat=True))
        assert len(rows) == len(set(rows))
        assert ReviewerStats.objects.get(version=version, reviewer=user).assigned == len(rows)


def test_a_full_pair_cannot_be_claimed(project, version, reviewer, reviewer2):
    services.ensure_pair_states(version=version)
    row = _row(version, 0)
    PairState.objects.filter(pk=row.pk).update(claims=1)
    # Overlap 1 and one claim already: the conditional update takes nothing.
    assert services._claim(version_id=version.pk, reviewer=reviewer, row_id=row.pk, row_index=0, overlap=1) is None
    with pytest.raises(ApplicationError, match="already has its reviewers"):
        services.review_submit(actor=reviewer2, project=project, row=row, choice="approve")


def test_next_walks_history_and_resumes_open_items(project, version, reviewer):
    services.ensure_pair_states(version=version)
    first = _next(version, reviewer, 1)
    second = _next(version, reviewer, 1, first.row_index)  # skipped without deciding `first`
    assert (first.row_index, second.row_index) == (0, 1)
    services.review_submit(actor=reviewer, project=project, row=_row(version, 1), choice="approve")
    assert _next(version, reviewer, 1).row_index == 0  # resume: first open pair
    from webapp.review.selectors import assignment_prev
    assert assignment_prev(version=version, reviewer=reviewer, before_index=1).row_index == 0
    assert assignment_prev(version=version, reviewer=reviewer, before_index=0) is None


def test_consensus_conflict_and_resolution(project, version, reviewer, reviewer2, admin_user):
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    row0, row1 = _row(version, 0), _row(version, 1)
    services.review_submit(actor=reviewer, project=project, row=row0, choice="approve")
    assert PairState.objects.get(pk=row0.pk).state == "unreviewed"  # 1 of 2 reviews
    services.review_submit(actor=reviewer2, project=project, row=row0, choice="approve")
    s0 = PairState.objects.get(pk=row0.pk)
    assert (s0.state, s0.decision_source, s0.final_label) == ("approved", "consensus", "approve")

    services.review_submit(actor=reviewer, project=project, row=row1, choice="reject")
    services.review_submit(actor=reviewer2, project=project, row=row1, choice="flag", reason="harmful")
    s1 = PairState.objects.get(pk=row1.pk)
    assert s1.state == "conflict" and s1.disagreement and s1.votes == (0, 0, 1, 1)
    counters = VersionReviewStats.objects.get(pk=version.pk)
    assert (counters.n_conflict, counters.n_approved, counters.n_unreviewed) == (1, 1, 6)

    services.conflict_resolve(actor=admin_user, project=project, row=row1, label="swap")
    s1.refresh_from_db()
    assert (s1.state, s1.final_swap, s1.decision_source, s1.resolved_by) == ("approved", True, "admin", admin_user)
    counters.refresh_from_db()
    assert (counters.n_conflict, counters.n_approved) == (0, 2)
    # Neither reviewer agreed with the final "swap" on row1; both agreed on row0.
    for user in (reviewer, reviewer2):
        rs = ReviewerStats.objects.get(version=version, reviewer=user)
        assert (rs.final_total, rs.final_agree) == (2, 1)
    # A reviewer changing their mind later does not undo an admin's decision.
    services.review_submit(actor=reviewer, project=project, row=row1, choice="approve")
    assert PairState.objects.get(pk=row1.pk).state == "approved"
    with pytest.raises(ApplicationError, match="Resolve with"):
        services.conflict_resolve(actor=admin_user, project=project, row=row1, label="maybe")


def test_flag_needs_a_reason(project, version, reviewer):
    services.ensure_pair_states(version=version)
    with pytest.raises(ApplicationError, match="why") as exc:
        services.review_submit(actor=reviewer, project=project, row=_row(version, 0), choice="flag")
    assert exc.value.field == "reason"


def _recount(version):
    """Counters recomputed from scratch, to compare with the incrementally kept ones."""
    labels = defaultdict(dict)
    for row_id, reviewer_id, label in Review.objects.filter(version=version).values_list("row_id", "reviewer_id",
                                                                                          "label"):
        labels[row_id][reviewer_id] = label
    total = Counter()
    for s in PairState.objects.filter(version=version):
        total.update(tally.contribution(tally.RowSnapshot(s.state, s.final_label, labels[s.pk])))
    return {k: v for k, v in total.items() if v}


def _stored(version):
    out = Counter()
    c = VersionReviewStats.objects.get(pk=version.pk)
    for s in ("unreviewed", "approved", "rejected", "flagged", "conflict"):
        out[("state", s)] = c.count(s)
    for p in VoteProfile.objects.filter(version=version):
        out[("profile", (p.approve, p.swap, p.reject, p.flag))] = p.count
    for p in PairAgreement.objects.filter(version=version):
        out[("pair", p.rater_a_id, p.rater_b_id, p.label_a, p.label_b)] = p.count
    for r in ReviewerStats.objects.filter(version=version):
        out[("final_total", r.reviewer_id)] = r.final_total
        out[("final_agree", r.reviewer_id)] = r.final_agree
    return {k: v for k, v in out.items() if v}


def test_counters_match_a_full_recount_after_random_work(project, make, reviewer, reviewer2, engineer, admin_user):
    version = make(project, name="random", rows=12)
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    rng = random.Random(7)
    users = [reviewer, reviewer2, engineer]
    for _ in range(40):
        user = rng.choice(users)
        a = _next(version, user, 2)
        if a is None:
            a = Assignment.objects.filter(reviewer=user, version=version).order_by("?").first()
        choice = rng.choice(["left", "right", "approve", "swap", "reject", "flag"])
        services.review_submit(actor=user, project=project, row=_row(version, a.row_index), choice=choice,
                               reason="why" if choice == "flag" else "")
        if rng.random() < 0.15:
            services.conflict_resolve(actor=admin_user, project=project, row=_row(version, rng.randrange(12)),
                                      label=rng.choice(services.RESOLVE_LABELS))
    first_three = list(DatasetRow.objects.filter(version=version, index__lt=3).values_list("pk", flat=True))
    services.bulk_apply(actor=admin_user, project=project, version=version, row_ids=first_three, action="reject")
    services.bulk_apply(actor=admin_user, project=project, version=version,
                        row_ids=[_row(version, 1).pk, _row(version, 5).pk], action="reset")
    assert _stored(version) == _recount(version)
    assert VersionReviewStats.objects.get(pk=version.pk).reviews == Review.objects.filter(version=version).count()
    services.response_edit(actor=reviewer, project=project, row=_row(version, 4), side="chosen", text="x")
    services.comment_add(actor=reviewer, project=project, row=_row(version, 4), text="y")
    PairState.objects.filter(version=version).update(n_edits=7)  # damage, repaired below
    # A rebuild from scratch lands on the same counters (and on the same per-reviewer work counts).
    kept = _stored(version)
    work = sorted(ReviewerStats.objects.filter(version=version).values_list("reviewer_id", "assigned", "done",
                                                                             "time_ms_total"))
    call_command("review_rebuild_counters", str(version.pk), stdout=io.StringIO())
    assert _stored(version) == kept
    assert sorted(PairState.objects.filter(version=version).exclude(n_edits=0, n_comments=0)
                  .values_list("row_index", "n_edits", "n_comments")) == [(4, 1, 1)]
    assert sorted(ReviewerStats.objects.filter(version=version).values_list("reviewer_id", "assigned", "done",
                                                                             "time_ms_total")) == work


def test_decisions_edits_and_comments_are_audited(project, version, reviewer, admin_user):
    services.ensure_pair_states(version=version)
    row = _row(version, 2)
    review = services.review_submit(actor=reviewer, project=project, row=row, choice="reject")
    services.review_submit(actor=reviewer, project=project, row=row, choice="approve")
    decide = list(AuditLog.objects.filter(action="review.decide").order_by("id"))
    assert len(decide) == 2 and all(e.actor == reviewer and e.project == project for e in decide)
    assert decide[0].object_id == str(review.pk) and decide[0].after["review"]["label"] == "reject"
    assert decide[1].before["review"]["label"] == "reject" and decide[1].after["review"]["label"] == "approve"

    edit = services.response_edit(actor=reviewer, project=project, row=row, side="chosen", text="Better answer")
    edit2 = services.response_edit(actor=reviewer, project=project, row=row, side="chosen", text="Best answer")
    assert (edit.revision, edit2.revision) == (1, 2)
    row.refresh_from_db()
    assert row.chosen == "Good answer 2"  # the dataset row is untouched
    entries = list(AuditLog.objects.filter(action="review.edit").order_by("id"))
    assert entries[0].before["text"] == "Good answer 2" and entries[0].after["text"] == "Better answer"
    assert entries[1].before == {"side": "chosen", "revision": 1, "text": "Better answer"}
    with pytest.raises(ApplicationError, match="unchanged"):
        services.response_edit(actor=reviewer, project=project, row=row, side="chosen", text="Best answer")
    with pytest.raises(ApplicationError, match="empty"):
        services.response_edit(actor=reviewer, project=project, row=row, side="rejected", text="  ")

    services.comment_add(actor=reviewer, project=project, row=row, text="Typo in the prompt")
    assert AuditLog.objects.get(action="review.comment").after == {"text": "Typo in the prompt"}
    services.conflict_resolve(actor=admin_user, project=project, row=row, label="reject")
    resolved = AuditLog.objects.get(action="review.resolve")
    assert resolved.before["state"] == "approved" and resolved.after == {"state": "rejected", "final_label": "reject",
                                                                          "source": "admin"}
    n = services.bulk_apply(actor=admin_user, project=project, version=version, row_ids=[row.pk, _row(version, 3).pk],
                            action="approve")
    assert n == 2 and AuditLog.objects.filter(action="review.bulk", actor=admin_user).count() == 2


def test_bulk_apply_validates(project, version, admin_user):
    with pytest.raises(ApplicationError, match="Unknown bulk action"):
        services.bulk_apply(actor=admin_user, project=project, version=version, row_ids=[1], action="nuke")
    with pytest.raises(ApplicationError, match="Select at least one"):
        services.bulk_apply(actor=admin_user, project=project, version=version, row_ids=[], action="approve")


def test_release_returns_open_pairs_to_the_pool(project, version, reviewer, reviewer2, admin_user):
    services.ensure_pair_states(version=version)
    held = _next(version, reviewer, 1)
    _next(version, reviewer, 1, held.row_index)
    services.review_submit(actor=reviewer, project=project, row=_row(version, held.row_index), choice="approve")
    assert services.assignments_release(actor=admin_user, project=project, version=version, reviewer=reviewer) == 1
    assert _next(version, reviewer2, 1).row_index == 1  # the released pair is free again
    assert ReviewerStats.objects.get(version=version, reviewer=reviewer).assigned == 1
    assert AuditLog.objects.filter(action="review.release").exists()

