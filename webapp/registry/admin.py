from django.contrib import admin

from webapp.registry.models import ModelEntry


@admin.register(ModelEntry)
class ModelEntryAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "kind", "path", "hub_id", "created_at")
    list_filter = ("kind", "project")
    search_fields = ("name", "path", "hub_id")
