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
    # 4 reviewers x 6 claims = 24 slots = 12 pairs x overlap 2, each filled exactly twice.
    assert sum(per_row.values()) == 24 and set(per_row.values()) == {2}
    assert {s.claims for s in PairState.objects.filter(version=version)} == {2}
