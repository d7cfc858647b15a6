"""The length pre-flight in the launch: counted with the base model's tokenizer on the chosen rows, refusing a
launch in which every prompt is too long, warning above the user's share; kept with the job for the run page
(beside the run's clip ratio), and printed by `launch_job --dry-run` and returned by the API's dry run."""
from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from tests.webapp.runs.conftest import make_version
from webapp.datasets.models import DatasetKind
from webapp.runs.models import MetricPoint
from webapp.runs.services import job_create
from webapp.runs.services.plan import plan_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def mixed_version(project):
    """18 short sums (4 characters: 4 tokens for the demo's character tokenizer) and 2 long ones."""
    short = [{"prompt": f"{a}+{b}=", "ground_truth": str(a + b)} for a in range(1, 10) for b in (1, 2)]
    long = [{"prompt": "11+22+33=", "ground_truth": "66"}, {"prompt": "1+2+3+4+5+6=", "ground_truth": "21"}]
    return make_version(project, "mixed", DatasetKind.PROMPTS, short[:16] + long, short[16:])


def plan(project, version, model, reward_spec, **hp):
    return plan_job(project=project, kind="grpo", backend="local", preset="demo-cpu", hp_overrides=hp,
                    dataset_version=version, reward_spec=reward_spec, base_model=model, include_unreviewed=True)


def test_counts_with_the_models_tokenizer_and_warns_above_the_users_share(project, mixed_version, tiny_model,
                                                                          reward_spec):
    p = plan(project, mixed_version, tiny_model, reward_spec, max_prompt_length=8)
    lengths = p.lengths
    assert (lengths["unit"], lengths["rows"], lengths["over"], lengths["max"], lengths["median"]) == \
        ("tokens", 20, 2, 12, 4)
    assert lengths["tokenizer"] == "tiny" and sum(lengths["histogram"]["counts"]) == 20
    assert p.errors == {} and "2 of 20 prompts (10.0%)" in p.warnings["max_prompt_length"]
    quiet = plan(project, mixed_version, tiny_model, reward_spec, max_prompt_length=8, overlong_prompt_warn=0.2)
    assert "max_prompt_length" not in quiet.warnings and quiet.errors == {}
    refused = plan(project, mixed_version, tiny_model, reward_spec, max_prompt_length=3)
    assert "Every prompt is longer than the max prompt length 3 (the shortest is 4 tokens)" in \
        refused.errors["max_prompt_length"]


def test_the_job_keeps_its_preflight_and_the_run_page_shows_it_beside_the_clip_ratio(
        project, mixed_version, tiny_model, reward_spec, engineer, viewer, as_user, no_enqueue):
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_prompt_length": 8}, dataset_version=mixed_version, reward_spec=reward_spec,
                     base_model=tiny_model, include_unreviewed=True)
    assert job.data_manifest["lengths"]["over"] == 2
    page = as_user(viewer).get(f"/p/{project.slug}/jobs/{job.pk}/").content.decode()
    assert 'id="lengths"' in page and 'id="lengths-figure"' in page and "shown from the first step" in page
    MetricPoint.objects.bulk_create(MetricPoint(job=job, step=s, name="response_length/clip_ratio", value=v,
                                                wall_time=1.7e9 + s) for s, v in ((1, 0.5), (2, 0.25)))
    page = as_user(viewer).get(f"/p/{project.slug}/jobs/{job.pk}/").content.decode()
    assert "<strong>25.0%</strong> at step 2, 37.5% on average over 2 steps" in page


def test_cli_and_api_dry_runs_report_it(project, mixed_version, tiny_model, reward_fn, engineer, api_for,
                                        no_enqueue):
    out = io.StringIO()
    call_command("launch_job", "--project", project.slug, "--kind", "grpo", "--preset", "demo-cpu", "--dataset",
                 "mixed", "--model", "tiny", "--reward", "exact-match", "--set", "max_prompt_length=8", "--dry-run",
                 stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "# length pre-flight (tiny's tokenizer and chat template)" in text
    assert "2 of 20 (10.0%) longer than max_prompt_length 8" in text
    assert re.search(r"^# +3-4 +18 #{40}$", text, re.M)  # the longest bar is the 18 short prompts
    assert text.count("> max") == 2  # the two long prompts' bars
    body = api_for(engineer).post(f"/api/projects/{project.slug}/jobs/", {
        "kind": "grpo", "preset": "demo-cpu", "dataset": "mixed", "model": "tiny", "reward": ["exact-match"],
        "set": {"max_prompt_length": 8}, "dry_run": True}, format="json").json()
    assert body["lengths"]["over"] == 2 and body["lengths"]["histogram"]["counts"][3] == 18
    assert "max_prompt_length" in body["warnings"]
