"""Every model of the app is in the Django admin, and its changelist renders."""
from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin

pytestmark = pytest.mark.django_db

OUR_MODELS = [m for m in apps.get_models() if m.__module__.startswith("webapp.")]


def test_every_model_is_registered():
    missing = [m.__name__ for m in OUR_MODELS if not admin.site.is_registered(m)]
    assert missing == []


@pytest.mark.parametrize("model", OUR_MODELS, ids=lambda m: m.__name__)
def test_changelist_renders(client, django_user_model, model):
    # (tests/conftest.py's `admin_user` is a project admin, not a Django superuser)
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw"))
    url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
    assert client.get(url).status_code == 200
