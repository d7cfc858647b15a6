from django.contrib import admin

from webapp.core.models import AuditLog, Invitation, Membership, Project, UserSession


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "review_overlap", "review_blind", "created_at")
    search_fields = ("name", "slug")
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("project", "user", "role")
    list_filter = ("role",)


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ("project", "username", "role", "invited_by", "created_at")
    list_filter = ("role",)
    search_fields = ("username",)


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ("created_at", "project", "actor", "action", "object_type", "object_id", "summary")
    list_filter = ("action",)
    search_fields = ("summary", "object_id")
    readonly_fields = [f.name for f in AuditLog._meta.fields]


@admin.register(UserSession)
class UserSessionAdmin(admin.ModelAdmin):
    """Signed-in sessions: an admin can see who is signed in and end a session by deleting it."""

    list_display = ("user", "expire_date")
    list_select_related = ("user",)
    fields = ("user", "expire_date")
    readonly_fields = ("user", "expire_date")
