from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "webapp.monitoring"
    label = "monitoring"
