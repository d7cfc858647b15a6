"""Pages: who may read and who may write; the editor, save, diff and test-run pages."""
from __future__ import annotations

import pytest

from webapp.rewards.models import RewardTestRun, RewardVersion
from webapp.rewards.scoring import reward_test_run_create

pytestmark = pytest.mark.django_db


def pages(project, fn, run):
    base = f"/p/{project.slug}/rewards/"
    return [base, f"{base}{fn.pk}/", f"{base}{fn.pk}/diff/", f"{base}models/", f"{base}test-runs/{run.pk}/",
            f"{base}test-runs/{run.pk}/?fragment=1", f"{base}{fn.pk}/?run={run.pk}"]


@pytest.fixture
def stored_run(reward_fn, engineer, arith):
    return reward_test_run_create(function=reward_fn, user=engineer, dataset_version=arith, responses_text="3\n5")


@pytest.mark.parametrize("who", ["viewer", "reviewer", "engineer", "admin_user"])
def test_members_read_every_page(request, as_user, project, reward_fn, stored_run, who):
    client = as_user(request.getfixturevalue(who))
    for url in pages(project, reward_fn, stored_run):
        assert client.get(url).status_code == 200, url


def test_outsiders_get_404_everywhere(as_user, outsider, project, reward_fn, stored_run):
    client = as_user(outsider)
    for url in pages(project, reward_fn, stored_run) + [f"/p/{project.slug}/rewards/new/"]:
        assert client.get(url).status_code == 404, url


def test_anonymous_users_are_sent_to_login(client, project, reward_fn):
    resp = client.get(f"/p/{project.slug}/rewards/{reward_fn.pk}/")
    assert resp.status_code == 302 and "/login/" in resp["Location"]


@pytest.mark.parametrize("who", ["viewer", "reviewer"])
def test_low_roles_cannot_write(request, as_user, project, reward_fn, arith, exact_source, who):
    client = as_user(request.getfixturevalue(who))
    base = f"/p/{project.slug}/rewards/"
    assert client.get(f"{base}new/").status_code == 403
    assert client.post(f"{base}new/", {"name": "x", "source": exact_source, "entry_point": "compute_score"}
                       ).status_code == 403
    assert client.post(f"{base}{reward_fn.pk}/", {"source": exact_source + "#\n", "entry_point": "compute_score"}
                       ).status_code == 403
    assert client.post(f"{base}{reward_fn.pk}/test-run/", {"dataset_version": arith.pk, "limit": 2}).status_code == 403
    assert reward_fn.versions.count() == 1 and not RewardTestRun.objects.exists()


def test_viewer_sees_read_only_code_and_no_save_button(as_user, viewer, project, reward_fn):
    html = as_user(viewer).get(f"/p/{project.slug}/rewards/{reward_fn.pk}/").content.decode()
    assert 'data-readonly="1"' in html and "Save as new version" not in html
    assert "Only engineers and admins can test-run" in html


def test_editor_page_shows_the_editor_isolation_and_history(as_user, engineer, project, reward_fn):
    html = as_user(engineer).get(f"/p/{project.slug}/rewards/{reward_fn.pk}/").content.decode()
    assert "vendor/codemirror/codemirror.js" in html and 'data-code-editor="python"' in html
    assert "Sandbox isolation: bubblewrap" in html or "Sandbox isolation: rlimits" in html
    assert reward_fn.latest_version.sha256[:10] in html and "Run test" in html


def test_create_from_the_form(as_user, engineer, project, exact_source):
    resp = as_user(engineer).post(f"/p/{project.slug}/rewards/new/", {
        "name": "exact", "entry_point": "compute_score", "source": exact_source.replace("\n", "\r\n"),
        "message": "hello"})
    version = RewardVersion.objects.get(function__name="exact")
    assert resp.status_code == 302 and resp["Location"].endswith(f"/rewards/{version.function_id}/")
    assert version.source == exact_source and version.message == "hello"  # CRLF from the browser normalised


def test_save_through_the_editor_and_unchanged_save_message(as_user, engineer, project, reward_fn, exact_source):
    client = as_user(engineer)
    url = f"/p/{project.slug}/rewards/{reward_fn.pk}/"
    resp = client.post(url, {"source": exact_source, "entry_point": "compute_score", "message": "same"}, follow=True)
    assert "identical to version 1; no new version was created" in resp.content.decode()
    resp = client.post(url, {"source": exact_source.replace("1.0 if", "0.5 if"), "entry_point": "compute_score",
                             "message": "half"}, follow=True)
    assert "Saved version 2." in resp.content.decode()
    assert list(reward_fn.versions.values_list("number", "message")) == [(2, "half"), (1, "first")]


def test_syntax_error_is_shown_next_to_the_source_with_the_line_marked(as_user, engineer, project, reward_fn):
    bad = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n    return [1\n"
    resp = as_user(engineer).post(f"/p/{project.slug}/rewards/{reward_fn.pk}/",
                                  {"source": bad, "entry_point": "compute_score"})
    html = resp.content.decode()
    assert resp.status_code == 200 and "Not saved. Line 2" in html and 'data-error-lines="2"' in html
    assert reward_fn.versions.count() == 1


def test_old_version_view_and_unknown_version(as_user, viewer, project, reward_fn):
    client = as_user(viewer)
    url = f"/p/{project.slug}/rewards/{reward_fn.pk}/"
    assert client.get(url + "?version=1").status_code == 200
    assert client.get(url + "?version=9").status_code == 404


def test_diff_is_rendered_escaped(as_user, engineer, viewer, project, reward_fn, exact_source):
    from webapp.rewards.services import reward_version_save

    reward_version_save(function=reward_fn, user=engineer, message="html",
                        source=exact_source + "X = '<script>alert(1)</script>'\n")
    html = as_user(viewer).get(f"/p/{project.slug}/rewards/{reward_fn.pk}/diff/?a=1&b=2").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert "+1 −0" in html
    assert as_user(viewer).get(f"/p/{project.slug}/rewards/{reward_fn.pk}/diff/?a=7").status_code == 404


def test_test_run_form_without_javascript(as_user, engineer, project, reward_fn, arith):
    resp = as_user(engineer).post(f"/p/{project.slug}/rewards/{reward_fn.pk}/test-run/",
                                  {"dataset_version": arith.pk, "split": "", "limit": 3, "responses": ""})
    run = RewardTestRun.objects.get()
    assert resp.status_code == 302 and resp["Location"].endswith(f"/rewards/test-runs/{run.pk}/")
    # prompt rows without a reference: the ground truth itself is scored, so exact match gives 1.0
    assert [r["score"] for r in run.results] == [1.0, 1.0, 1.0]
    page = as_user(engineer).get(resp["Location"]).content.decode()
    assert "plotly/plotly.min.js" in page and "data-histogram" in page and "Per-sample results" in page


def test_test_run_form_reports_bad_input(as_user, engineer, project, reward_fn):
    resp = as_user(engineer).post(f"/p/{project.slug}/rewards/{reward_fn.pk}/test-run/",
                                  {"limit": 3, "responses": ""}, follow=True)
    assert "Choose a dataset version, or paste responses" in resp.content.decode()


def test_stored_run_page_shows_the_traceback_and_marks_the_line(as_user, viewer, engineer, project, reward_fn,
                                                                 arith):
    source = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
              "    return 1 / 0\n")
    run = reward_test_run_create(function=reward_fn, user=engineer, source=source, dataset_version=arith, limit=1)
    html = as_user(viewer).get(f"/p/{project.slug}/rewards/test-runs/{run.pk}/").content.decode()
    assert "ZeroDivisionError" in html and 'data-error-lines="2"' in html and "Traceback" in html


def test_test_run_of_another_function_is_not_shown_on_this_editor(as_user, engineer, project, reward_fn, arith,
                                                                  exact_source, stored_run):
    from webapp.rewards.services import reward_function_create

    other = reward_function_create(project=project, user=engineer, name="other", source=exact_source)
    assert as_user(engineer).get(f"/p/{project.slug}/rewards/{other.pk}/?run={stored_run.pk}").status_code == 404


def test_reward_models_page_lists_reward_models_only(as_user, viewer, project):
    from webapp.registry.models import ModelEntry, ModelKind

    ModelEntry.objects.create(project=project, name="rm-demo", kind=ModelKind.REWARD_MODEL, path="/m/rm")
    ModelEntry.objects.create(project=project, name="policy", kind=ModelKind.CAUSAL_LM, path="/m/p")
    html = as_user(viewer).get(f"/p/{project.slug}/rewards/models/").content.decode()
    assert "rm-demo" in html and "policy" not in html and f"/p/{project.slug}/jobs/models/" in html


def test_empty_list_says_what_to_do(as_user, engineer, viewer, project):
    assert "New reward function" in as_user(engineer).get(f"/p/{project.slug}/rewards/").content.decode()
    assert "An engineer of this project can create one" in as_user(viewer).get(
        f"/p/{project.slug}/rewards/").content.decode()


def test_every_starter_template_saves_and_runs(as_user, engineer, project, arith):
    from django.utils.html import escape

    from webapp.rewards.selectors import reward_templates

    templates = reward_templates()
    assert {t["name"] for t in templates} >= {"exact_match", "gsm8k_exact", "boxed_math", "format_regex",
                                              "length_penalty", "combined"}
    client = as_user(engineer)
    for t in templates:
        page = client.get(f"/p/{project.slug}/rewards/new/?template={t['name']}").content.decode()
        assert escape(t["title"]) in page
        resp = client.post(f"/p/{project.slug}/rewards/new/", {"name": t["name"], "entry_point": "compute_score",
                                                               "source": t["source"], "message": "template"})
        assert resp.status_code == 302, (t["name"], resp.content.decode()[:2000])
        fn = RewardVersion.objects.get(function__name=t["name"]).function
        run = reward_test_run_create(function=fn, user=engineer, dataset_version=arith, limit=2)
        assert run.state == "succeeded" and all(r["error"] is None for r in run.results), (t["name"], run.results)
