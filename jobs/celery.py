import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("workbench")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Training runs never sit inside a task: tasks only launch, poll and ingest, so they are short.
app.conf.task_routes = {
    "jobs.tasks.launch_job_gpu": {"queue": "gpu"},
}
app.autodiscover_tasks(["jobs"], related_name="tasks", force=True)

from jobs.heartbeat import WorkerHeartbeat  # noqa: E402 - the app must exist first

app.steps["consumer"].add(WorkerHeartbeat)
