from django.apps import AppConfig


class RewardsConfig(AppConfig):
    name = "webapp.rewards"
    label = "rewards"
