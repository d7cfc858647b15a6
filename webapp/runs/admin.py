from django.contrib import admin

from webapp.runs.models import Checkpoint, Job, JobAttempt, MetricPoint, RunEvent


class AttemptInline(admin.TabularInline):
    model = JobAttempt
    extra = 0
    readonly_fields = ("number", "reason", "state", "resume_from", "supervisor_pid", "host", "started_at",
                       "ended_at", "returncode")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "project", "kind", "backend", "state", "last_step", "created_at")
    list_filter = ("state", "kind", "backend", "project")
    search_fields = ("name",)
    raw_id_fields = ("parent", "resume_checkpoint", "dataset_version", "base_model", "teacher_model")
    inlines = [AttemptInline]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("job", "step", "status", "promoted", "size_bytes", "created_at")
    list_filter = ("status", "promoted")
    raw_id_fields = ("job",)


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ("job", "kind", "step", "message", "created_at")
    list_filter = ("kind",)
    raw_id_fields = ("job",)


@admin.register(MetricPoint)
class MetricPointAdmin(admin.ModelAdmin):
    list_display = ("job", "name", "step", "value", "attempt")
    search_fields = ("name",)
    raw_id_fields = ("job",)


# JobAttempt and anything added later get the defaults.
from webapp.core.admin_utils import register_app_models  # noqa: E402

register_app_models("runs")
