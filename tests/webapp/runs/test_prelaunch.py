"""The launch review's zero-signal check (services/prelaunch.py): which prompts and reward it samples, that the
same review reuses it, and what it says once a worker ran it, with a reward that ties and one that does not."""
from __future__ import annotations

import pytest

from webapp.datasets.models import DatasetRow
from webapp.rewards.services import reward_function_create
from webapp.runs.models import ZeroSignalRun, ZeroSignalStatus
from webapp.runs.services import prelaunch
from webapp.runs.services.plan import plan_job
from webapp.runs.services.zero_signal import dry_run_execute

pytestmark = pytest.mark.django_db

# Scores an answer by its text: the samples of a group differ, so its scores do too (a tie only by chance).
BY_TEXT = '''
import hashlib

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return hashlib.sha256(solution_str.encode()).digest()[0] / 255
'''


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr(prelaunch, "enqueue", lambda name, *args, **kw: calls.append((name, *args)))
    return calls


def plan(project, version, model, spec, kind="grpo", **hp):
    return plan_job(project=project, kind=kind, backend="local", preset="demo-cpu", hp_overrides=hp,
                    dataset_version=version, reward_spec=spec, base_model=model, include_unreviewed=True,
                    check_probes=False)


def spec_of(*versions, shaping="raw"):
    return {"shaping": shaping, "components": [{"type": "function", "version_id": v.pk, "weight": 1.0}
                                               for v in versions]}


def test_exact_match_on_a_model_that_never_answers_right_warns_with_its_answers(
        project, engineer, prompts_version, tiny_model, reward_fn, sent, django_capture_on_commit_callbacks):
    p = plan(project, prompts_version, tiny_model, spec_of(reward_fn.latest_version), group_size=5)
    assert p.ok, p.errors
    with django_capture_on_commit_callbacks(execute=True):
        run = prelaunch.prelaunch_check(plan=p, user=engineer)
    assert sent == [("jobs.tasks.zero_signal_dry_run", run.pk)] and run.status == ZeroSignalStatus.QUEUED
    params = run.params
    assert (params["group_size"], params["max_response_length"], len(params["rows"])) == (5, 4, prelaunch.PROMPTS)
    train = DatasetRow.objects.filter(version=prompts_version, split="train")
    for row in params["rows"]:  # the job's own training rows, each with its index in the version
        assert train.get(index=row["index"]).prompt == row["prompt"]
    assert len({r["index"] for r in params["rows"]}) == prelaunch.PROMPTS
    assert prelaunch.verdict(run)["finished"] is False

    again = plan(project, prompts_version, tiny_model, spec_of(reward_fn.latest_version), group_size=5)
    assert prelaunch.prelaunch_check(plan=again, user=engineer).pk == run.pk  # the same review: the same check
    other = plan(project, prompts_version, tiny_model, spec_of(reward_fn.latest_version), group_size=3)
    assert prelaunch.prelaunch_check(plan=other, user=engineer).pk != run.pk  # another group size: another check

    dry_run_execute(run_id=run.pk, poll_s=0.05)
    run.refresh_from_db()
    assert run.status == ZeroSignalStatus.SUCCEEDED, run.error
    v = prelaunch.verdict(run)
    assert v["warn"] and v["share"] == 1.0 and v["tied"] == v["counted"] == prelaunch.PROMPTS and v["all_wrong"] == 4
    assert len(v["answers"]) == 3 and all(len(a["responses"]) == 5 for a in v["answers"])
    assert all(r["reward"] == 0.0 and r["text"] != a["ground_truth"] for a in v["answers"] for r in a["responses"])
    assert sorted(run.result["tied_indices"]) == sorted(r["index"] for r in params["rows"])


def test_a_reward_that_tells_answers_apart_does_not_warn(project, engineer, prompts_version, tiny_model, reward_fn,
                                                         sent):
    by_text = reward_function_create(project=project, user=None, name="by-text", source=BY_TEXT).latest_version
    p = plan(project, prompts_version, tiny_model, spec_of(by_text, reward_fn.latest_version, shaping="raw"))
    run = prelaunch.prelaunch_check(plan=p, user=engineer)
    assert [c["version_id"] for c in run.params["reward_spec"]["components"]] == [by_text.pk,
                                                                                reward_fn.latest_version.pk]
    dry_run_execute(run_id=run.pk, poll_s=0.05)
    run.refresh_from_db()
    v = prelaunch.verdict(run)
    assert run.status == ZeroSignalStatus.SUCCEEDED, run.error
    assert not v["warn"] and v["share"] < prelaunch.WARN_AT and v["counted"] == prelaunch.PROMPTS
    scores = [r["reward"] for r in v["answers"][0]["responses"]]
    assert len(set(scores)) > 1  # the whole reward: the by-text part varies


def test_only_grpo_with_function_rewards_and_a_local_model_is_checked(project, engineer, prompts_version, tiny_model,
                                                                      reward_fn, sent):
    from webapp.registry.models import ModelEntry, ModelKind

    assert prelaunch.prelaunch_check(plan=plan(project, prompts_version, tiny_model, spec_of(reward_fn.latest_version),
                                               kind="distill"), user=engineer) is None
    hub = ModelEntry.objects.create(project=project, name="hub", kind=ModelKind.CAUSAL_LM, path="",
                                    hub_id="org/model")
    p = plan(project, prompts_version, hub, spec_of(reward_fn.latest_version))
    assert prelaunch.check_params(p) is None
    assert not ZeroSignalRun.objects.exists() and not sent
