"""The review API as the review screen uses it, and the agreement stats against hand-computed values."""
from __future__ import annotations

import pytest

from webapp.datasets.models import DatasetRow
from webapp.review import services
from webapp.review.models import Assignment, PairState

pytestmark = pytest.mark.django_db

API = "/api/projects/acme/review/versions/"


def _row(version, index):
    return DatasetRow.objects.get(version=version, index=index)


def test_review_flow_next_submit_prev(api_for, version, reviewer):
    api = api_for(reviewer)
    first = api.get(API + f"{version.pk}/next/").json()
    item = first["item"]
    assert item["index"] == 0 and item["my_review"] is None and item["assigned"]
    assert first["progress"] == {"done": 0, "assigned": 1, "left": 8, "left_exact": True, "decided": 0,
                                 "conflicts": 0, "flagged": 0, "total": 8, "reviews": 0}
    # Pick the left response; the server resolves it with the orientation it recorded.
    left_side = item["left"]["side"]
    resp = api.post(API + f"{version.pk}/items/{item['row_id']}/review/", {"choice": "left", "time_ms": 1234},
                    format="json")
    assert resp.status_code == 201
    mine = resp.json()["my_review"]
    assert mine["label"] == ("approve" if left_side == "chosen" else "swap") and mine["time_ms"] == 1234
    assert resp.json()["progress"]["done"] == 1 and resp.json()["progress"]["decided"] == 1
    second = api.get(API + f"{version.pk}/next/?after=0").json()["item"]
    assert second["index"] == 1
    back = api.get(API + f"{version.pk}/prev/?before=1").json()["item"]
    assert back["index"] == 0 and back["my_review"]["label"] == mine["label"]
    none = api.get(API + f"{version.pk}/prev/?before=0").json()
    assert none["item"] is None and "first" in none["message"]


def test_the_left_side_matches_the_recorded_assignment(api_for, version, reviewer):
    item = api_for(reviewer).get(API + f"{version.pk}/next/").json()["item"]
    assignment = Assignment.objects.get(reviewer=reviewer, row_id=item["row_id"])
    assert item["left"]["side"] == ("chosen" if assignment.left_is_chosen else "rejected")
    assert item["left"]["text"] == ("Good answer 0" if assignment.left_is_chosen else "Bad answer 0")


def test_nothing_left_says_so(api_for, project, make, reviewer):
    version = make(project, name="tiny", rows=1)
    api = api_for(reviewer)
    item = api.get(API + f"{version.pk}/next/").json()["item"]
    api.post(API + f"{version.pk}/items/{item['row_id']}/review/", {"choice": "reject"}, format="json")
    body = api.get(API + f"{version.pk}/next/?after=0").json()
    assert body["item"] is None and "Nothing left" in body["message"]


def test_blind_mode_hides_other_reviewers(api_for, project, version, reviewer, reviewer2, engineer):
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    row = _row(version, 0)
    services.review_submit(actor=reviewer2, project=project, row=row, choice="reject")
    services.comment_add(actor=reviewer2, project=project, row=row, text="I think it is wrong")
    url = API + f"{version.pk}/items/{row.pk}/"
    blind = api_for(reviewer).get(url).json()["item"]
    assert "reviews" not in blind and "state" not in blind and blind["comments"] == []
    assert api_for(engineer).get(url).json()["item"]["reviews"][0]["reviewer"] == "rob"
    project.review_blind = False
    project.save()
    open_view = api_for(reviewer).get(url).json()["item"]
    assert [r["label"] for r in open_view["reviews"]] == ["reject"]
    assert open_view["comments"][0]["text"] == "I think it is wrong"


@pytest.mark.parametrize("url,body,detail", [
    ("{v}/items/{row}/review/", {"choice": "maybe"}, "choice"),
    ("{v}/items/{row}/review/", {"choice": "flag"}, "why"),
    ("{v}/items/{row}/edit/", {"side": "chosen", "text": " "}, "empty"),
    ("{v}/items/{row}/comments/", {"text": ""}, "comment"),
    ("{v}/bulk/", {"action": "approve", "row_ids": []}, "row_ids"),
])
def test_bad_input_is_a_400_with_a_message(api_for, version, reviewer, engineer, url, body, detail):
    row = _row(version, 0)
    user = engineer if "bulk" in url else reviewer
    resp = api_for(user).post(API + url.format(v=version.pk, row=row.pk), body, format="json")
    assert resp.status_code == 400
    assert detail in resp.json()["detail"].lower()


def test_bad_query_parameters_are_400(api_for, version, reviewer):
    api = api_for(reviewer)
    assert api.get(API + f"{version.pk}/next/?after=abc").json() == {"detail": "after must be a whole number."}
    assert api.get(API + f"{version.pk}/prev/").status_code == 400
    assert api.get(API + f"{version.pk}/items/999999/").status_code == 404


def test_payload_html_is_sanitised(api_for, version, reviewer):
    row = _row(version, 0)
    row.chosen = "<script>alert(1)</script>**bold**"
    row.prompt = "[x](javascript:alert(1))"
    row.save()
    item = api_for(reviewer).get(API + f"{version.pk}/items/{row.pk}/").json()["item"]
    html = item["prompt_html"] + item["left"]["html"] + item["right"]["html"]
    assert "<script" not in html and "javascript:" not in html and "<strong>bold</strong>" in html


def test_resolve_and_conflicts_api(api_for, project, version, reviewer, reviewer2, admin_user):
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    row = _row(version, 3)
    services.review_submit(actor=reviewer, project=project, row=row, choice="approve")
    services.review_submit(actor=reviewer2, project=project, row=row, choice="swap")
    listed = api_for(admin_user).get(API + f"{version.pk}/conflicts/").json()
    assert [r["index"] for r in listed["results"]] == [3]
    assert {r["label"] for r in listed["results"][0]["reviews"]} == {"approve", "swap"}
    resp = api_for(admin_user).post(API + f"{version.pk}/items/{row.pk}/resolve/", {"label": "swap"}, format="json")
    assert resp.json() == {"row_id": row.pk, "state": "approved", "final_label": "swap", "final_swap": True,
                           "source": "admin"}
    assert api_for(admin_user).get(API + f"{version.pk}/conflicts/").json()["results"] == []


def test_stats_match_hand_computed_values(api_for, project, make, reviewer, reviewer2, viewer):
    # Two reviewers on 10 pairs (a = approve, r = reject):
    #   (a,a) x4, (a,r) x2, (r,a) x1, (r,r) x3
    # Cohen: p_o = 7/10, A: a=6 r=4, B: a=5 r=5, p_e = .6*.5 + .4*.5 = .5, kappa = (.7-.5)/.5 = 0.4
    # Fleiss (n=2, N=10): totals a = 4*2+3 = 11, r = 3+3*2 = 9 -> p = (.55, .45), P_e = .3025+.2025 = .505
    #   P_i = 1 for the 7 agreeing pairs, 0 for the 3 split ones -> P_bar = .7
    #   kappa = (.7 - .505)/(1 - .505) = .195/.495 = 13/33
    # Krippendorff: n = 20 values, o_aa = 4*2 = 8, o_rr = 3*2 = 6, o_ar = o_ra = 3; n_a = 11, n_r = 9
    #   alpha = (19*(8+6) - (11*10 + 9*8)) / (20*19 - 182) = (266-182)/198 = 84/198 = 14/33
    version = make(project, name="agree", rows=10)
    project.review_overlap = 2
    project.save()
    services.ensure_pair_states(version=version)
    pattern = [("approve", "approve")] * 4 + [("approve", "reject")] * 2 + [("reject", "approve")] + [
        ("reject", "reject")] * 3
    times_a = [100, 300, 200, 900, 500, 400, 700, 600, 800, 1000]
    for i, (la, lb) in enumerate(pattern):
        row = _row(version, i)
        services.review_submit(actor=reviewer, project=project, row=row, choice=la, time_ms=times_a[i])
        services.review_submit(actor=reviewer2, project=project, row=row, choice=lb, time_ms=50)
    stats = api_for(viewer).get(API + f"{version.pk}/stats/").json()
    assert stats["states"] == {"unreviewed": 0, "approved": 4, "rejected": 3, "flagged": 0, "conflict": 3}
    (pair,) = stats["pairs"]
    assert (pair["rater_a"], pair["rater_b"], pair["items"]) == ("rita", "rob", 10)
    assert pair["percent_agreement"] == pytest.approx(0.7)
    assert pair["cohens_kappa"] == pytest.approx(0.4)
    d = stats["dataset"]
    assert d["pairwise_agreement"] == pytest.approx(0.7)
    assert d["fleiss_kappa"] == pytest.approx(13 / 33) and d["fleiss_raters"] == 2 and d["fleiss_items"] == 10
    assert d["krippendorff_alpha"] == pytest.approx(14 / 33)
    rita = next(r for r in stats["reviewers"] if r["reviewer"] == "rita")
    # Times sorted: 100..1000 step 100 -> median of the 5th and 6th = (500+600)/2 = 550
    assert rita["done"] == 10 and rita["median_time_ms"] == pytest.approx(550)
    # 7 pairs have a consensus final decision and rita agreed with all 7.
    assert rita["final_items"] == 7 and rita["agreement_with_final"] == pytest.approx(1.0)
    assert PairState.objects.filter(version=version, state="conflict").count() == 3
