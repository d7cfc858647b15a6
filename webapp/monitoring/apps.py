from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "webapp.monitoring"
    label = "monitoring"

    def ready(self) -> None:
        from webapp.monitoring.hooks import on_job_synced
        from webapp.runs.signals import job_synced

        job_synced.connect(on_job_synced, dispatch_uid="monitoring.after_sync")
