"""The launch planner refuses reward versions whose probes fail (or are pending) until an engineer overrides."""
from __future__ import annotations

import os

import pytest
from django.utils import timezone

from webapp.core.models import AuditLog
from webapp.rewards import probes
from webapp.rewards.models import ProbeRunState
from webapp.rewards.services import reward_function_create
from webapp.runs.models import Job
from webapp.runs.services import JobValidationError, job_create

pytestmark = pytest.mark.django_db

ALWAYS_ONE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 1.0\n"


def _create(project, user, version, model, reward_version):
    spec = {"shaping": "raw", "components": [{"type": "function", "version_id": reward_version.pk, "weight": 1.0}]}
    return job_create(project=project, user=user, kind="grpo", backend="local", preset="demo-cpu",
                      hp_overrides={"max_steps": 10}, dataset_version=version, reward_spec=spec, base_model=model,
                      include_unreviewed=True)


def test_failing_probes_refuse_the_launch_until_overridden(project, engineer, prompts_version, tiny_model, no_enqueue):
    fn = reward_function_create(project=project, user=engineer, name="always", source=ALWAYS_ONE)
    version = fn.latest_version
    with pytest.raises(JobValidationError) as exc:  # never probed: the launch runs them first, then refuses
        _create(project, engineer, prompts_version, tiny_model, version)
    message = exc.value.errors["reward_spec"]
    assert message.startswith("always v1 fails 7 probes (empty answer: scored 1; built-in probes must score below "
                              "0.5;") and "override" in message
    assert Job.objects.count() == 0 and no_enqueue == []

    probes.probe_override(version=version, user=engineer, reason="a constant reward for a KL smoke test")
    job = _create(project, engineer, prompts_version, tiny_model, version)
    assert job.reward_versions.get() == version
    created = AuditLog.objects.get(action="job.create", object_id=str(job.pk))
    assert "overridden by erin: a constant reward for a KL smoke test" in created.after["warnings"]["reward_probes"]
    assert AuditLog.objects.filter(action="reward.probe_override", actor=engineer).count() == 1


def test_a_good_reward_launches_after_its_probes_ran(project, engineer, prompts_version, tiny_model, reward_fn,
                                                      no_enqueue):
    version = reward_fn.latest_version
    assert probes.probe_status(version).state == "pending"
    job = _create(project, engineer, prompts_version, tiny_model, version)
    assert job.pk and probes.probe_status(version).state == "passed"


def test_pending_probes_on_a_worker_refuse_with_a_clear_message(project, engineer, prompts_version, tiny_model,
                                                                 reward_fn, no_enqueue):
    reward_fn.latest_version.probe_runs.update(state=ProbeRunState.RUNNING, started_at=timezone.now())
    with pytest.raises(JobValidationError) as exc:
        _create(project, engineer, prompts_version, tiny_model, reward_fn.latest_version)
    assert "probes pending" in exc.value.errors["reward_spec"]


def test_without_a_working_sandbox_the_launch_is_refused_even_with_overridden_probes(
        broken_bwrap, monkeypatch, project, engineer, prompts_version, tiny_model, no_enqueue):
    from training.sandbox import isolation

    broken_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # first, with a working bubblewrap: probes fail,
    isolation.forget_probe()                                     # and an engineer overrides them
    fn = reward_function_create(project=project, user=engineer, name="always", source=ALWAYS_ONE)
    version = fn.latest_version
    assert probes.probe_run_now(version=version, user=engineer).failed_count == 7
    probes.probe_override(version=version, user=engineer, reason="a constant reward for a KL smoke test")
    monkeypatch.setenv("PATH", broken_path)  # then bubblewrap stops working on this host
    isolation.forget_probe()
    with pytest.raises(JobValidationError) as exc:
        _create(project, engineer, prompts_version, tiny_model, version)
    message = exc.value.errors["reward_spec"]
    assert message.startswith("Reward code cannot run here: bwrap does not work here: bwrap: setting up uid map")
    assert "apt-get install bubblewrap" in message and Job.objects.count() == 0 and no_enqueue == []


def test_probes_the_sandbox_refused_run_again_once_it_works(broken_bwrap, monkeypatch, project, engineer,
                                                           prompts_version, tiny_model, reward_fn, no_enqueue):
    from training.sandbox import isolation

    version = reward_fn.latest_version
    refused = probes.probe_run_now(version=version, user=engineer)
    assert refused.isolation == "refused" and probes.probe_status(version).state == "pending"  # not "failed"
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # bubblewrap works again
    isolation.forget_probe()
    job = _create(project, engineer, prompts_version, tiny_model, version)
    assert job.pk and probes.probe_status(version).state == "passed"
