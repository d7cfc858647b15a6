from django.urls import include, path

from webapp.core import views

# Feature apps mount their pages under /p/<slug>/...
project_patterns = [
    path("", include("webapp.overview.urls")),
    path("members/", views.members, name="members"),
    path("members/<int:pk>/remove/", views.member_remove, name="member-remove"),
    path("invitations/<int:pk>/revoke/", views.invitation_revoke, name="invitation-revoke"),
    path("invitations/<int:pk>/link/", views.invitation_link, name="invitation-link"),
    path("settings/", views.project_settings, name="project-settings"),
    path("audit/", views.audit_log, name="audit-log"),
    path("datasets/", include("webapp.datasets.urls")),
    path("review/", include("webapp.review.urls")),
    path("rewards/", include("webapp.rewards.urls")),
    path("jobs/", include("webapp.runs.urls")),
    path("monitor/", include("webapp.monitoring.urls")),
    path("notifications/", include("webapp.notifications.urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("invitations/<int:pk>/<str:answer>/", views.invitation_answer, name="invitation-answer"),
    path("join/<str:token>/", views.join, name="join"),
    path("p/<slug:slug>/", include(project_patterns)),
]
