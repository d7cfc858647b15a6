"""The Celery application and its tasks (thin wrappers that take ids and call services)."""
from jobs.celery import app as celery_app

__all__ = ["celery_app"]
