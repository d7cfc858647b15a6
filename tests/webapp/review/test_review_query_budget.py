"""The review screen's two hot requests stay at a handful of queries however many pairs a version holds."""
from __future__ import annotations

import pytest
from django.db import connection

from webapp.datasets.models import DatasetRow

pytestmark = pytest.mark.django_db

API = "/api/projects/acme/review/versions/"
# Counted as the test client sees them: the session with its user (1) and the transaction's SAVEPOINT and
# RELEASE (2, not sent outside a test's transaction) are included. The figures are the same at a million pairs
# (bench/bench_scale.py counts them there). Counters are upserts, so a decision whose vote profile is the
# version's first of its kind costs no more. On PostgreSQL a claim takes the pair and reads it with its state in one
# statement, writes the assignment and the reviewer's counter and reads the progress sums in another. A decision
# locks the pair with the actor's assignment (and reads the row with it), writes the review while reading the
# pair's reviews and the progress counters as they were, then writes its assignment, the pair's state, its audit
# entry and the counters in one statement: 5 queries outside a test (the session, the access, those three).
def _budget(sqlite: int, postgresql: int) -> int:
    return postgresql if connection.vendor == "postgresql" else sqlite


NEXT_MAX = (10, 7)
SUBMIT_MAX = (15, 7)


def _claim_and_submit(client, version):
    item = client.get(API + f"{version.pk}/next/").json()["item"]
    return client.post(API + f"{version.pk}/items/{item['row_id']}/review/", {"choice": "left", "time_ms": 10},
                       content_type="application/json")


def test_next_claims_a_pair_in_a_fixed_number_of_queries(client, version, reviewer, django_assert_max_num_queries):
    client.force_login(reviewer)
    assert _claim_and_submit(client, version).status_code == 201  # warm: pair states exist, counters started
    with django_assert_max_num_queries(_budget(*NEXT_MAX)):
        item = client.get(API + f"{version.pk}/next/").json()["item"]
    assert item["index"] == 1 and item["assigned"]


def test_submit_records_a_review_in_a_fixed_number_of_queries(client, version, reviewer, django_assert_max_num_queries):
    client.force_login(reviewer)
    assert _claim_and_submit(client, version).status_code == 201
    item = client.get(API + f"{version.pk}/next/").json()["item"]
    with django_assert_max_num_queries(_budget(*SUBMIT_MAX)):
        resp = client.post(API + f"{version.pk}/items/{item['row_id']}/review/", {"choice": "left"},
                           content_type="application/json")
    assert resp.status_code == 201 and resp.json()["progress"]["done"] == 2
    assert DatasetRow.objects.get(pk=item["row_id"]).reviews.count() == 1
