"""Reviewers claiming at the same moment never exceed the overlap (PostgreSQL: real row locks)."""
from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection, connections

from webapp.review import services
from webapp.review.models import Assignment, PairState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs concurrent transactions (PostgreSQL)")
def test_concurrent_claims_respect_the_overlap(project, make, django_user_model):
    version = make(project, name="race", rows=12)
    services.ensure_pair_states(version=version)
    users = [django_user_model.objects.create_user(username=f"racer{i}") for i in range(4)]
    barrier = threading.Barrier(len(users))
    errors: list[BaseException] = []

    def work(user):
        try:
            barrier.wait()
            for _ in range(6):
                services.assignment_claim(version=version, reviewer=user, overlap=2)
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    per_row = Counter(Assignment.objects.filter(version=version).values_list("row_id", flat=True))
    states = {s.pk: s.claims for s in PairState.objects.filter(version=version)}
    assert max(per_row.values()) <= 2  # never more reviewers than the overlap
    assert all(states[row_id] == n for row_id, n in per_row.items())  # the counter matches the claims
    pairs = list(Assignment.objects.filter(version=version).values_list("reviewer_id", "row_id"))
    assert len(pairs) == len(set(pairs))  # nobody holds a pair twice
    # A reviewer came away short only if every pair with a free slot was already theirs.
    held = Counter(r for r, _ in pairs)
    free = [row_id for row_id, claims in states.items() if claims < 2]
    for user in users:
        if held[user.pk] < 6:
            assert all((user.pk, row_id) in set(pairs) for row_id in free)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs concurrent transactions (PostgreSQL)")
def test_concurrent_decisions_keep_counters_exact(project, make, reviewer, reviewer2):
    from webapp.datasets.models import DatasetRow
    from webapp.review.models import ReviewerStats, VersionReviewStats

    project.review_overlap = 2
    project.save()
    version = make(project, name="race2", rows=10)
    services.ensure_pair_states(version=version)
    rows = list(DatasetRow.objects.filter(version=version).order_by("index"))
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(user, order, choice):
        try:
            barrier.wait()
            for row in order:
                services.review_submit(actor=user, project=project, row=row, choice=choice)
        except BaseException as exc:  # a deadlock would surface here
            errors.append(exc)
        finally:
            connections.close_all()

    # Opposite orders and both reviewers on every pair: each decision touches both reviewers' counters.
    threads = [threading.Thread(target=work, args=(reviewer, rows, "approve")),
               threading.Thread(target=work, args=(reviewer2, rows[::-1], "reject"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    counters = VersionReviewStats.objects.get(pk=version.pk)
    assert (counters.n_conflict, counters.reviews, counters.n_unreviewed) == (10, 20, 0)
    for user in (reviewer, reviewer2):
        rs = ReviewerStats.objects.get(version=version, reviewer=user)
        assert (rs.done, rs.assigned) == (10, 10)
