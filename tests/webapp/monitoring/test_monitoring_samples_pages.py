"""The sample browser's pages: every view renders escaped, bad parameters give a message (never a 500), and one
project never reads another's samples."""
from __future__ import annotations

import pytest

from tests.webapp.monitoring.sample_rows import PROMPTS, write_rollouts
from webapp.monitoring import samples as sel

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(make_job):
    job = make_job()
    write_rollouts(job.run_dir, [10, 20])
    sel._cache.clear()
    return job


def get(client, job, **params) -> str:
    r = client.get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/samples/", {"fragment": 1, **params})
    assert r.status_code == 200
    return r.content.decode()


def test_step_view_defaults_to_rollouts_when_there_is_no_validation(job, viewer, as_user):
    body = get(as_user(viewer), job)
    assert 'data-samples-kind="rollout"' in body and "Step 20: 6 samples of 3 prompts" in body
    assert "Training rollouts <small>(2 steps)</small>" in body and "Validation <small>(0 steps)</small>" in body
    assert "advantage 0.707" in body and ">truncated<" in body and "Reward error: exact: ValueError: boom" in body
    filtered = get(as_user(viewer), job, kind="rollout", step=20, truncated=1)
    assert "1 matches the filters" in filtered and filtered.count("data-sample ") == 1
    assert "Clear filters" in filtered
    by_text = get(as_user(viewer), job, kind="rollout", step=20, q="3+3")
    assert "2 match the filters" in by_text and 'value="3+3"' in by_text
    bad = get(as_user(viewer), job, kind="rollout", min_score="lots")
    assert "min score must be a number" in bad
    assert "is above the highest" in get(as_user(viewer), job, kind="rollout", min_score=2, max_score=1)
    assert "No training rollouts samples at step 7" in get(as_user(viewer), job, kind="rollout", step=7)


def test_prompt_group_diff_and_tokens_views(job, viewer, as_user):
    c = as_user(viewer)
    key = sel.prompt_key(PROMPTS[1])
    across = get(c, job, kind="rollout", view="prompt", prompt=key)
    assert across.count('class="mon-col"') == 2 and "the answer is 10" in across and "the answer is 20" in across
    assert 'name="a"' in across and "Show the diff" in across
    assert "That prompt is not in any logged step" in get(c, job, kind="rollout", view="prompt", prompt="nope")
    tied = get(c, job, kind="rollout", view="group", step=10, uid="10:0")
    assert "data-tie-flag" in tied and "All 2 samples tie" in tied
    assert "data-tie-flag" not in get(c, job, kind="rollout", view="group", step=10, uid="10:1")
    diff = get(c, job, kind="rollout", view="diff", prompt=key, a=10, b=20, sample=0)
    assert "<del>10</del><ins>20</ins>" in diff and "1 word removed" in diff
    assert "no sample at step 99" in get(c, job, kind="rollout", view="diff", prompt=key, a=10, b=99)
    offset = sel.step_index(job.run_dir, "rollout", 20).entries[2].offset
    tokens = get(c, job, kind="rollout", view="tokens", step=20, offset=offset)
    assert tokens.count('class="mon-tok"') == 4 and 'data-logratio="0.1"' in tokens
    assert "Largest contributions" in tokens
    trunc = sel.step_index(job.run_dir, "rollout", 20).entries[4].offset  # written without tokens
    assert "did not log them" in get(c, job, kind="rollout", view="tokens", step=20, offset=trunc)
    assert "No sample at that place" in get(c, job, kind="rollout", view="tokens", step=20, offset=3)


def test_texts_are_escaped_and_other_projects_cannot_read(make_job, viewer, outsider, as_user, samples):
    job = make_job()
    samples(job, 5, [{"input": "<script>x()</script>", "output": "<b>4</b>", "score": 1.0, "gts": "4"}])
    sel._cache.clear()
    body = get(as_user(viewer), job)
    assert "<script>x()" not in body and "&lt;b&gt;4&lt;/b&gt;" in body
    page = as_user(viewer).get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/samples/").content.decode()
    assert "<h1>Samples" in page and "&lt;b&gt;4&lt;/b&gt;" in page
    r = as_user(outsider).get(f"/p/{job.project.slug}/monitor/jobs/{job.pk}/samples/", {"fragment": 1})
    assert r.status_code in (403, 404)


def test_tokens_view_colours_by_entropy_advantage_and_train_rollout_difference(make_job, viewer, as_user):
    import json
    from pathlib import Path

    from tests.webapp.monitoring.conftest import add_points
    from tests.webapp.monitoring.sample_rows import rollout_row

    job = make_job()
    local = rollout_row(3, 1, 0, output="the answer is 3", score=0.0, length=4)
    local.update(token_entropy=[0.25, 1.5, 0.5, 1.0], token_logprob_diff=[0.0, 0.03, -0.2, 0.0], advantage=-0.7071)
    verl = {"input": "1+1=", "output": "2", "gts": "2", "score": 1.0, "step": 3}  # a VERL dump's row
    folder = Path(job.run_dir) / "samples" / "rollout"
    folder.mkdir(parents=True)
    (folder / "3.jsonl").write_text(json.dumps(local) + "\n" + json.dumps(verl) + "\n")
    add_points(job, "training/rollout_probs_diff_mean", [0.0004], start_step=3)
    sel._cache.clear()
    c = as_user(viewer)
    entries = sel.step_index(job.run_dir, "rollout", 3).entries
    by = {}
    for key in ("kl", "advantage", "entropy", "mismatch"):
        by[key] = get(c, job, kind="rollout", view="tokens", step=3, offset=entries[0].offset, by=key)
        assert 'aria-label="Colour the tokens by"' in by[key] and by[key].count('class="mon-tok"') == 4
    assert 'data-value="1.5"' in by["entropy"] and "less sure the policy was" in by["entropy"]
    assert by["advantage"].count('data-value="-0.7071"') == 4 and "whole response has one colour" in by["advantage"]
    assert 'data-value="-0.2"' in by["mismatch"] and "rounding noise stays pale" in by["mismatch"]
    assert 'data-logratio="0.1"' in by["kl"] and 'aria-current="true">KL contribution' in by["kl"]
    verl_mis = get(c, job, kind="rollout", view="tokens", step=3, offset=entries[1].offset, by="mismatch")
    assert "only for the whole step" in verl_mis and "mean 0.0004" in verl_mis and "mon-tok\"" not in verl_mis
    # an unknown colouring falls back to the KL view, never a 500
    assert 'aria-current="true">KL contribution' in get(c, job, kind="rollout", view="tokens", step=3,
                                                        offset=entries[0].offset, by="<script>")


def test_a_sample_shows_what_each_reward_printed_beside_its_score(make_job, viewer, as_user):
    import json
    from pathlib import Path

    job = make_job()
    row = {"input": "1+1=", "output": "2", "gts": "2", "score": 1.0, "step": 5, "uid": "5:0", "sample_index": 0,
           "components": {"exact": 1.0, "shape": 0.0}, "errors": {}, "extras": {}, "advantage": 0.0,
           "reward_logs": {"exact": "compared <2> with 2\n"}}
    path = Path(job.run_dir) / "samples" / "rollout" / "5.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(row) + "\n")
    sel._cache.clear()
    body = get(as_user(viewer), job, kind="rollout", step=5)
    facts = body[body.index('class="mon-facts"'):]
    assert facts.index("reward <strong>") < facts.index("exact printed") < facts.index("compared &lt;2&gt; with 2")
    assert "shape printed" not in body  # a component that printed nothing shows nothing


def test_token_spans_are_escaped_and_carry_each_tokens_value():
    from webapp.monitoring.sample_text import tokens_html

    html = tokens_html([{"text": "<b>&", "value": 0.123456, "colour": "rgba(1,2,3,0.5)"},
                        {"text": "x", "value": None, "colour": "transparent"}], "kl")
    assert '<span class="mon-tok" style="background:rgba(1,2,3,0.5)" title="0.1235" data-value="0.123456" ' \
           'data-logratio="0.123456">&lt;b&gt;&amp;</span>' in html
    assert 'title="" data-value="" data-logratio="">x</span>' in html
    assert "data-logratio" not in tokens_html([{"text": "y", "value": 1.0, "colour": "red"}], "entropy")
