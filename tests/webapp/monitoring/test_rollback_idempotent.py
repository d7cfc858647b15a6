"""Two identical rollbacks at the same moment make one child run, and both callers get it."""
from __future__ import annotations

import contextlib
import threading

import pytest
from django.db import connection

from webapp.monitoring.services.checkpoints import job_rollback
from webapp.runs.models import Job, JobState
from webapp.runs.services import launch


@pytest.fixture
def both_past_the_checks(monkeypatch):
    """Hold each rollback just before it creates its child until the other one gets there too.

    Without serialisation both callers arrive, as two web requests at the same moment would; with it
    the second never gets that far (the barrier then gives up after a short wait)."""
    barrier = threading.Barrier(2)
    create = launch.job_create_child

    def held(**kwargs):
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=2)
        return create(**kwargs)

    monkeypatch.setattr(launch, "job_create_child", held)


@pytest.mark.django_db(transaction=True)
def test_two_identical_rollbacks_at_once_make_one_child(launched_job, checkpoint, engineer, both_past_the_checks):
    parent = launched_job()
    checkpoint(parent, 10)
    results, errors = [], []

    def roll():
        try:
            results.append(job_rollback(job=Job.objects.get(pk=parent.pk), step=10, user=engineer,
                                        hp_overrides={"lr": "5e-4"}).pk)
        except Exception as exc:  # noqa: BLE001 - the test reports whatever the second caller got
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=roll) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(results) == 2 and results[0] == results[1]
    assert list(Job.objects.filter(parent=parent).values_list("pk", flat=True)) == [results[0]]


@pytest.mark.django_db
def test_a_rollback_with_other_settings_or_after_a_failed_child_is_new(launched_job, checkpoint, engineer):
    parent = launched_job()
    checkpoint(parent, 10)
    checkpoint(parent, 15)
    first = job_rollback(job=parent, step=10, user=engineer, hp_overrides={"lr": "5e-4"})
    assert job_rollback(job=parent, step=10, user=engineer, hp_overrides={"lr": 5e-4}) == first
    others = {job_rollback(job=parent, step=10, user=engineer, hp_overrides={"lr": "1e-4"}).pk,
              job_rollback(job=parent, step=10, user=engineer).pk,
              job_rollback(job=parent, step=15, user=engineer, hp_overrides={"lr": "5e-4"}).pk}
    assert len(others) == 3 and first.pk not in others
    Job.objects.filter(pk=first.pk).update(state=JobState.FAILED)  # a retry after a failed branch is a new run
    retry = job_rollback(job=parent, step=10, user=engineer, hp_overrides={"lr": "5e-4"})
    assert retry.pk != first.pk and Job.objects.filter(parent=parent).count() == 5
