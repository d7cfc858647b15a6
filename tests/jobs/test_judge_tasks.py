"""The judge and scheduled-human-evaluation tasks: registered under the names services send, one service call each."""
from __future__ import annotations

from celery import current_app

from webapp.core import queue


def test_tasks_are_registered_by_the_names_services_enqueue_and_call_one_service(monkeypatch):
    import jobs.tasks as tasks

    assert {queue.RUN_JUDGE, queue.PREPARE_HUMAN_EVAL} <= set(current_app.tasks)
    calls = []
    monkeypatch.setattr("webapp.monitoring.services.judge_run", lambda **kw: calls.append(("judge", kw)))
    monkeypatch.setattr("webapp.monitoring.services.human_eval_prepare", lambda **kw: calls.append(("prepare", kw)))
    tasks.run_judge(7)
    tasks.prepare_human_eval(9)
    assert calls == [("judge", {"judge_run_id": 7}), ("prepare", {"task_id": 9})]
