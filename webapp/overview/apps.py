from django.apps import AppConfig


class OverviewConfig(AppConfig):
    name = "webapp.overview"
    label = "overview"
    verbose_name = "Project overview"
