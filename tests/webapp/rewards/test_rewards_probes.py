"""Probes: the built-ins a reward must score low, the author's probes with a range, failures, the launch gate."""
from __future__ import annotations

import pytest

from training.reward_templates import ORDER, get_template
from webapp.core.models import AuditLog
from webapp.core.services import ApplicationError
from webapp.rewards import probes
from webapp.rewards.models import ProbeRunState, RewardProbeRun
from webapp.rewards.services import reward_function_create, reward_version_save

pytestmark = pytest.mark.django_db

ALWAYS_ONE = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0
'''
CONTAINS = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if str(ground_truth) in solution_str else 0.0
'''
RAISES = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if not solution_str:
        raise ValueError("nothing to score")
    return 0.0
'''
HANGS_ON_LONG = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    while len(solution_str) > 10000:
        pass
    return 0.0
'''


@pytest.fixture
def probes_at_once(monkeypatch):
    """Probe runs queued on save run at once, by the service the worker's task calls."""
    from types import SimpleNamespace

    from django.db import transaction

    monkeypatch.setattr(probes, "transaction", SimpleNamespace(atomic=transaction.atomic,
                                                               on_commit=lambda fn, **kw: fn()))
    monkeypatch.setattr(probes, "_enqueue", lambda run_id: probes.probe_run_execute(run_id=run_id))


def by_key(run: RewardProbeRun) -> dict[str, dict]:
    return {r["key"]: r for r in run.results}


def test_a_reward_that_pays_for_anything_fails_the_empty_answer(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="always", source=ALWAYS_ONE)
    run = probes.current_run(fn.latest_version)
    assert run is not None and run.state == ProbeRunState.FAILED and run.trigger == "save"
    empty = by_key(run)["builtin:empty"]
    assert empty["passed"] is False and empty["score"] == 1.0
    assert empty["reason"] == "scored 1; built-in probes must score below 0.5"
    assert empty["input"]["solution_str"] == "" and empty["input"]["ground_truth"] == "72"
    assert run.failed_count == 7  # every built-in
    assert probes.probe_status(fn.latest_version).state == "failed"


def test_the_gsm8k_template_passes_every_builtin(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="gsm8k", source=get_template("gsm8k_exact"))
    run = probes.current_run(fn.latest_version)
    assert run.state == ProbeRunState.PASSED, [(r["name"], r["reason"]) for r in run.failures]
    assert len(run.results) == 7 and all(r["score"] == 0.0 for r in run.results)


def test_the_right_number_buried_in_noise_is_caught(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="contains", source=CONTAINS)
    failing = {r["key"] for r in probes.current_run(fn.latest_version).failures}
    assert failing == {"builtin:buried"}  # everything else lacks "72"


def test_author_probes_with_ranges_and_a_new_suite(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="gsm8k", source=get_template("gsm8k_exact"))
    first = probes.current_run(fn.latest_version)
    probes.probe_create(function=fn, user=engineer, name="right answer", solution_str="so #### 1,200",
                        ground_truth="1200", lo=1.0, hi=1.0)
    probes.probe_create(function=fn, user=engineer, name="wrong answer must not pay", solution_str="#### 12",
                        ground_truth="1200", hi=0.0)
    probes.probe_create(function=fn, user=engineer, name="expects too much", solution_str="#### 5",
                        ground_truth="5", lo=2.0)
    run = probes.current_run(fn.latest_version)
    assert run.pk != first.pk and run.suite_sha != first.suite_sha  # the suite changed: a new verdict
    results = [r for r in run.results if r["kind"] == "author"]
    assert [(r["name"], r["passed"]) for r in results] == [
        ("right answer", True), ("wrong answer must not pay", True), ("expects too much", False)]
    assert results[2]["reason"] == "scored 1, below the expected at least 2"
    # the built-ins now use the first probe's ground truth
    assert by_key(run)["builtin:buried"]["input"]["ground_truth"] == "1200"
    assert "1200" in by_key(run)["builtin:buried"]["input"]["solution_str"]
    assert AuditLog.objects.filter(action="reward.probe_add").count() == 3


def test_author_probe_input_is_checked(project, engineer):
    fn = reward_function_create(project=project, user=engineer, name="gsm8k", source=get_template("gsm8k_exact"))
    with pytest.raises(ApplicationError, match="expected range"):
        probes.probe_create(function=fn, user=engineer, name="p", solution_str="x")
    with pytest.raises(ApplicationError, match="lo must not be above hi"):
        probes.probe_create(function=fn, user=engineer, name="p", solution_str="x", lo=1, hi=0)
    with pytest.raises(ApplicationError, match="must be a number"):
        probes.probe_create(function=fn, user=engineer, name="p", solution_str="x", lo="high")
    assert fn.probes.count() == 0


def test_a_raising_or_hanging_reward_fails_with_the_message(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="raises", source=RAISES)
    run = probes.current_run(fn.latest_version)
    empty = by_key(run)["builtin:empty"]
    assert empty["passed"] is False and empty["score"] is None
    assert "ValueError" in empty["reason"] and "nothing to score" in empty["reason"] and empty["lineno"] == 3
    assert by_key(run)["builtin:choices"]["passed"] is True
    outcome = reward_version_save(function=fn, user=engineer, source=HANGS_ON_LONG)
    run = probes.current_run(outcome.version)
    degenerate = by_key(run)["builtin:degenerate"]
    assert degenerate["passed"] is False and "time" in degenerate["reason"].lower()
    assert [r["key"] for r in run.failures] == ["builtin:degenerate"]  # only that call was killed


def test_a_reward_that_cannot_load_fails_every_probe(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="boom",
                                source="raise RuntimeError('at import')\n" + ALWAYS_ONE)
    run = probes.current_run(fn.latest_version)
    assert run.failed_count == 7 and "could not be loaded" in run.error
    assert all("could not be loaded" in r["reason"] for r in run.results)


def test_scale_changes_the_rule(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="half", source=ALWAYS_ONE.replace("1.0", "0.5"))
    assert probes.current_run(fn.latest_version).failed_count == 7  # 0.5 is not below 0.5
    probes.probe_scale_set(function=fn, user=engineer, scale="custom", threshold="0.5")
    run = probes.current_run(fn.latest_version)
    assert run.state == ProbeRunState.PASSED and run.results[0]["expected"] == "score at most 0.5"
    with pytest.raises(ApplicationError, match="threshold"):
        probes.probe_scale_set(function=fn, user=engineer, scale="custom", threshold="")


def test_pending_then_run_before_launch(project, engineer):
    """Without a worker the saved version stays "probes pending"; the launch gate runs them and waits."""
    fn = reward_function_create(project=project, user=engineer, name="always", source=ALWAYS_ONE)
    version = fn.latest_version
    assert probes.probe_status(version).state == "pending"
    assert version.probe_runs.get().state == ProbeRunState.QUEUED
    errors, warnings = probes.probe_gate([version])
    assert version.probe_runs.get().state == ProbeRunState.FAILED  # the queued run was taken, not duplicated
    assert len(errors) == 1 and "always v1 fails 7 probes" in errors[0] and "empty answer: scored 1" in errors[0]
    assert "override" in errors[0] and warnings == []


def test_a_run_a_worker_is_on_keeps_the_launch_waiting(project, engineer):
    from django.utils import timezone

    fn = reward_function_create(project=project, user=engineer, name="always", source=ALWAYS_ONE)
    fn.latest_version.probe_runs.update(state=ProbeRunState.RUNNING, started_at=timezone.now())
    errors, _ = probes.probe_gate([fn.latest_version])
    assert errors == ["always v1: probes pending (a worker is running them now); launch again in a few seconds."]


def test_override_needs_a_reason_and_is_audited(project, engineer, probes_at_once):
    fn = reward_function_create(project=project, user=engineer, name="always", source=ALWAYS_ONE)
    version = fn.latest_version
    with pytest.raises(ApplicationError, match="Say why"):
        probes.probe_override(version=version, user=engineer, reason=" ")
    run = probes.probe_override(version=version, user=engineer, reason="constant baseline for a KL-only run")
    assert run.overridden and probes.probe_status(version).state == "overridden"
    log = AuditLog.objects.get(action="reward.probe_override")
    assert log.actor == engineer and "constant baseline" in log.summary and "empty answer" in log.after["failing"]
    errors, warnings = probes.probe_gate([version])
    assert errors == [] and "overridden by erin: constant baseline" in warnings[0]
    # a new version is checked afresh: the override belonged to the old one
    new = reward_version_save(function=fn, user=engineer, source=ALWAYS_ONE + "\n# v2\n").version
    assert probes.probe_status(new).state == "failed"


@pytest.mark.parametrize("name", ORDER)
def test_every_starter_template_passes_the_builtins(name):
    """Starting from a template never blocks a launch; the CLI form of the suite (nothing stored)."""
    from webapp.rewards.probes import probe_file_check

    result = probe_file_check(source=get_template(name))
    assert result["ok"], [(r["name"], r["reason"]) for r in result["results"] if not r["passed"]]
    assert len(result["results"]) == 7
