import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

from webapp.core.queue import USER_CODE_QUEUE, USER_CODE_TASKS

# redis:// and redis+socket:// URLs get kombu's Redis transport with one fix (jobs/redisbroker.py): a
# queue entry that is not a message is dropped instead of stopping the worker.
TRANSPORT_ALIASES["redis"] = "jobs.redisbroker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("workbench")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Training runs never sit inside a task: tasks only launch, poll and ingest, so they are short. Tasks that
# run users' reward code go to their own queue by default (webapp.core.queue.enqueue routes them too).
app.conf.task_routes = {name: {"queue": USER_CODE_QUEUE} for name in sorted(USER_CODE_TASKS)}
app.autodiscover_tasks(["jobs"], related_name="tasks", force=True)

from jobs.heartbeat import WorkerHeartbeat  # noqa: E402 - the app must exist first

app.steps["consumer"].add(WorkerHeartbeat)
