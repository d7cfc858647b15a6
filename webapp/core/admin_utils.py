"""Register every model of an app in the Django admin with sensible defaults for big tables."""
from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.db import models


def default_admin_for(model: type[models.Model]) -> type[admin.ModelAdmin]:
    fields = [f for f in model._meta.concrete_fields if not isinstance(f, models.JSONField | models.TextField)]
    relations = [f.name for f in model._meta.concrete_fields if isinstance(f, models.ForeignKey | models.OneToOneField)]
    choices = [f.name for f in fields if f.choices and f.name not in relations]
    return type(f"{model.__name__}Admin", (admin.ModelAdmin,), {
        "list_display": [f.name for f in fields][:7],
        # Raw id widgets and no full count: some of these tables hold millions of rows.
        "raw_id_fields": relations,
        "list_filter": choices[:3],
        "show_full_result_count": False,
        "list_per_page": 50,
    })


def register_app_models(app_label: str) -> None:
    for model in apps.get_app_config(app_label).get_models():
        if not admin.site.is_registered(model):
            admin.site.register(model, default_admin_for(model))
