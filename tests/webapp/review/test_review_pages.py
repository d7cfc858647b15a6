"""What the review pages show and do: screen, bulk list and filters, stats, conflicts, item resolution."""
from __future__ import annotations

import pytest

from webapp.core.models import AuditLog
from webapp.datasets.models import DatasetRow
from webapp.review import services
from webapp.review.models import PairState

pytestmark = pytest.mark.django_db


def _row(version, index):
    return DatasetRow.objects.get(version=version, index=index)


def test_index_lists_versions_and_the_empty_state(as_user, project, reviewer, make):
    page = as_user(reviewer).get("/p/acme/review/").content.decode()
    assert "No preference dataset is ready" in page
    make(project, name="prefs")
    make(project, name="arith", kind="prompts")
    page = as_user(reviewer).get("/p/acme/review/").content.decode()
    assert "prefs v1" in page and "arith" not in page


def test_screen_shows_shortcuts_and_links_settings_for_admins(as_user, version, reviewer, admin_user):
    page = as_user(reviewer).get(f"/p/acme/review/v/{version.pk}/").content.decode()
    for key in ("<kbd>1</kbd> Left is better", "<kbd>2</kbd> Right is better", "<kbd>R</kbd> Reject",
                "<kbd>F</kbd> Flag", "<kbd>N</kbd> Next", "<kbd>P</kbd> Previous", "js/review.js"):
        assert key in page
    assert f'data-api="/api/projects/acme/review/versions/{version.pk}/"' in page
    assert "/p/acme/settings/" not in page
    assert "/p/acme/settings/" in as_user(admin_user).get(f"/p/acme/review/v/{version.pk}/").content.decode()
    assert PairState.objects.filter(version=version).count() == 8  # states made on first visit


def test_screen_of_an_importing_version_is_404(as_user, project, make, reviewer):
    wip = make(project, name="wip", status="importing")
    assert as_user(reviewer).get(f"/p/acme/review/v/{wip.pk}/").status_code == 404


def _listed(resp) -> list[int]:
    return [r["index"] for r in resp.context["rows"]]


def test_pairs_filters(as_user, project, version, reviewer, reviewer2, engineer):
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    services.review_submit(actor=reviewer, project=project, row=_row(version, 1), choice="approve")
    services.review_submit(actor=reviewer2, project=project, row=_row(version, 1), choice="flag", reason="odd")
    services.review_submit(actor=reviewer, project=project, row=_row(version, 2), choice="approve")
    services.review_submit(actor=reviewer2, project=project, row=_row(version, 2), choice="approve")
    c = as_user(engineer)
    url = f"/p/acme/review/v/{version.pk}/pairs/"
    assert _listed(c.get(url)) == list(range(8))
    assert _listed(c.get(url, {"state": "conflict"})) == [1]
    assert _listed(c.get(url, {"state": "approved"})) == [2]
    assert _listed(c.get(url, {"flagged": "on"})) == [1]
    assert _listed(c.get(url, {"disagreement": "on"})) == [1]
    assert _listed(c.get(url, {"data_source": "code"})) == [1, 3, 5, 7]
    assert _listed(c.get(url, {"reviewer": reviewer2.pk})) == [1, 2]
    assert _listed(c.get(url, {"q": "question 5"})) == [5]
    assert _listed(c.get(url, {"index_from": 3, "index_to": 4})) == [3, 4]
    bad = c.get(url, {"index_from": 5, "index_to": 2})
    assert "Must not be below" in bad.content.decode()
    assert c.get(url, {"state": "approved"}).context["total"] == 1  # from the counters


def test_pairs_keyset_pages(as_user, project, make, engineer):
    version = make(project, name="long", rows=60)
    c = as_user(engineer)
    url = f"/p/acme/review/v/{version.pk}/pairs/"
    first = c.get(url)
    assert _listed(first) == list(range(50)) and first.context["next_after"] == 49
    assert _listed(c.get(url, {"after": 49})) == list(range(50, 60))


def test_bulk_apply_selected_and_matching(as_user, project, version, engineer):
    c = as_user(engineer)
    url = f"/p/acme/review/v/{version.pk}/pairs/"
    c.get(url)
    resp = c.post(url, {"action": "reject", "scope": "selected", "rows": [_row(version, 0).pk, _row(version, 1).pk]})
    assert resp.status_code == 302
    assert set(PairState.objects.filter(state="rejected").values_list("row_index", flat=True)) == {0, 1}
    resp = c.post(url + "?data_source=math", {"action": "swap", "scope": "matching"})
    assert resp.status_code == 302 and resp["Location"].endswith("?data_source=math")
    swapped = PairState.objects.filter(state="approved", final_swap=True)
    assert sorted(swapped.values_list("row_index", flat=True)) == [0, 2, 4, 6]
    assert AuditLog.objects.filter(action="review.bulk").count() == 6
    resp = c.post(url, {"action": "approve", "scope": "selected"})
    assert resp.status_code == 200 and "Tick at least one pair" in resp.content.decode()


def test_stats_page_shows_agreement(as_user, project, version, reviewer, reviewer2, viewer):
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    for i, (a, b) in enumerate([("approve", "approve"), ("reject", "approve"), ("reject", "reject")]):
        services.review_submit(actor=reviewer, project=project, row=_row(version, i), choice=a)
        services.review_submit(actor=reviewer2, project=project, row=_row(version, i), choice=b)
    page = as_user(viewer).get(f"/p/acme/review/v/{version.pk}/stats/").content.decode()
    assert "Cohen's kappa" in page and "rita &amp; rob" in page
    assert "Fleiss' kappa (2 raters, 3 pairs)" in page and "Krippendorff" in page
    assert "Release to others" not in page


def test_stats_page_empty_state(as_user, version, viewer):
    page = as_user(viewer).get(f"/p/acme/review/v/{version.pk}/stats/").content.decode()
    assert "No pair has two reviews yet" in page and "Nobody has reviewed this version yet" in page


def test_conflict_queue_and_resolution_page(as_user, project, version, reviewer, reviewer2, admin_user, engineer):
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    row = _row(version, 4)
    services.review_submit(actor=reviewer, project=project, row=row, choice="approve")
    services.review_submit(actor=reviewer2, project=project, row=row, choice="reject")
    url = f"/p/acme/review/v/{version.pk}/conflicts/"
    eng_page = as_user(engineer).get(url).content.decode()
    assert "rita: approve" in eng_page and "Only admins resolve them" in eng_page
    assert 'value="swap"' not in eng_page
    admin = as_user(admin_user)
    assert 'value="swap"' in admin.get(url).content.decode()
    resp = admin.post(f"/p/acme/review/v/{version.pk}/items/{row.pk}/", {"label": "reject", "next": url})
    assert resp.status_code == 302 and resp["Location"] == url
    assert PairState.objects.get(pk=row.pk).state == "rejected"
    assert "No conflicts" in admin.get(url).content.decode()
    item = admin.get(f"/p/acme/review/v/{version.pk}/items/{row.pk}/?next=javascript:alert(1)").content.decode()
    assert "javascript:alert" not in item and "Good answer 4" in item


def test_release_from_the_stats_page(as_user, project, version, reviewer, admin_user):
    services.ensure_pair_states(version=version)
    services.assignment_next(version=version, reviewer=reviewer, overlap=1)
    resp = as_user(admin_user).post(f"/p/acme/review/v/{version.pk}/release/", {"reviewer": reviewer.pk})
    assert resp.status_code == 302
    assert PairState.objects.get(row_index=0, version=version).claims == 0


def test_text_search_scans_a_block_per_page(as_user, project, make, engineer, monkeypatch):
    from webapp.review import selectors

    monkeypatch.setattr(selectors, "SEARCH_WINDOW", 5)
    version = make(project, name="search", rows=12)
    c = as_user(engineer)
    url = f"/p/acme/review/v/{version.pk}/pairs/"
    first = c.get(url, {"q": "question 9?"})
    assert _listed(first) == [] and first.context["next_after"] == 4 and first.context["searched_to"] == 4
    assert "Search the next rows" in first.content.decode()
    second = c.get(url, {"q": "question 9?", "after": 4})
    assert _listed(second) == [9] and second.context["next_after"] == 9
    last = c.get(url, {"q": "question 9?", "after": 9})
    assert _listed(last) == [] and last.context["next_after"] is None  # rows 10-11: the end
    assert _listed(c.get(url, {"q": "question"})) == [0, 1, 2, 3, 4]
