"""The review screen's two hot requests stay at a handful of queries however many pairs a version holds."""
from __future__ import annotations

import pytest

from webapp.datasets.models import DatasetRow

pytestmark = pytest.mark.django_db

API = "/api/projects/acme/review/versions/"
# Counted as the test client sees them: the session and the user (2) and the transaction's SAVEPOINT and
# RELEASE (2, not sent outside a test's transaction) are included. The figures are the same at a million pairs
# (bench/bench_scale.py counts them there). A decision whose vote profile is the version's first of its kind
# creates that counter row (the UPDATE finds none, then INSERT in a SAVEPOINT and RELEASE: 3 more); which side a
# pair shows on the left is random, so whether the test's "left" is such a decision is too.
NEXT_MAX = 11
SUBMIT_MAX = 16 + 3


def _claim_and_submit(client, version):
    item = client.get(API + f"{version.pk}/next/").json()["item"]
    return client.post(API + f"{version.pk}/items/{item['row_id']}/review/", {"choice": "left", "time_ms": 10},
                       content_type="application/json")


def test_next_claims_a_pair_in_a_fixed_number_of_queries(client, version, reviewer, django_assert_max_num_queries):
    client.force_login(reviewer)
    assert _claim_and_submit(client, version).status_code == 201  # warm: pair states exist, counters started
    with django_assert_max_num_queries(NEXT_MAX):
        item = client.get(API + f"{version.pk}/next/").json()["item"]
    assert item["index"] == 1 and item["assigned"]


def test_submit_records_a_review_in_a_fixed_number_of_queries(client, version, reviewer, django_assert_max_num_queries):
    client.force_login(reviewer)
    assert _claim_and_submit(client, version).status_code == 201
    item = client.get(API + f"{version.pk}/next/").json()["item"]
    with django_assert_max_num_queries(SUBMIT_MAX):
        resp = client.post(API + f"{version.pk}/items/{item['row_id']}/review/", {"choice": "left"},
                           content_type="application/json")
    assert resp.status_code == 201 and resp.json()["progress"]["done"] == 2
    assert DatasetRow.objects.get(pk=item["row_id"]).reviews.count() == 1
