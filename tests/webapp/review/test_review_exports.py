"""Exporting the pairs approved in review: edits and swaps applied, splits kept, from the page, API and CLI."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.urls import reverse

from webapp.datasets.models import DatasetRow
from webapp.review.exports import export_approved
from webapp.review.models import PairState
from webapp.review.services import ensure_pair_states

pytestmark = pytest.mark.django_db


@pytest.fixture
def decided(version):
    """Rows 0 and 3 approved (3 with its responses swapped, 3 is a val row), row 1 rejected, the rest unreviewed."""
    ensure_pair_states(version=version)
    rows = list(DatasetRow.objects.filter(version=version).order_by("index"))
    PairState.objects.filter(row=rows[0]).update(state="approved")
    PairState.objects.filter(row=rows[3]).update(state="approved", final_swap=True)
    PairState.objects.filter(row=rows[1]).update(state="rejected")
    return version


def test_only_approved_pairs_are_written_with_swaps_and_splits(decided, tmp_path, engineer):
    out = tmp_path / "approved.parquet"
    result = export_approved(version=decided, fmt="verl", out_path=out, user=engineer)
    table = pq.read_table(out).to_pylist()
    assert result.rows == 2
    assert [r["reward_model"]["ground_truth"] for r in table] == ["Good answer 0", "Bad answer 3"]
    assert [r["extra_info"]["split"] for r in table] == ["train", "val"]


def test_the_version_page_form_downloads_the_approved_pairs(decided, as_user, engineer, project):
    page = reverse("datasets-export", args=[project.slug, decided.dataset_id, decided.number])
    resp = as_user(engineer).get(page, {"format": "trl", "approved_only": "1"}, follow=True)
    assert resp.status_code == 200
    assert resp.redirect_chain[0][0].startswith(reverse("review-export", args=[project.slug, decided.pk]))
    assert "-approved.trl.jsonl" in resp["Content-Disposition"]
    lines = [json.loads(x) for x in b"".join(resp.streaming_content).splitlines()]
    assert [(r["chosen"], r["rejected"]) for r in lines] == [("Good answer 0", "Bad answer 0"),
                                                            ("Bad answer 3", "Good answer 3")]


def test_the_api_answers_the_same_and_refuses_reviewers(decided, api_for, engineer, reviewer, project):
    url = f"/api/projects/{project.slug}/datasets/{decided.dataset_id}/versions/{decided.number}/export/"
    resp = api_for(engineer).get(url, {"format": "jsonl", "approved_only": "true"}, follow=True)
    assert resp.status_code == 200
    assert len(b"".join(resp.streaming_content).splitlines()) == 2
    direct = reverse("api-review-export", args=[project.slug, decided.pk])
    assert api_for(reviewer).get(direct, {"format": "jsonl"}).status_code == 403
    assert api_for(engineer).get(direct, {"format": "csv"}).status_code == 400


def test_nothing_approved_is_a_clear_error(version, as_user, engineer, project):
    resp = as_user(engineer).get(reverse("review-export", args=[project.slug, version.pk]),
                                 {"format": "jsonl"}, follow=True)
    assert "There are no rows to export." in resp.content.decode()


def test_the_command_exports_approved_only(decided, tmp_path, capsys):
    out = tmp_path / "a.jsonl"
    call_command("export_dataset", "prefs", "--format", "jsonl", "--out", str(out), "--approved-only")
    assert len(out.read_text().splitlines()) == 2
    assert "Wrote 2 rows" in capsys.readouterr().out
