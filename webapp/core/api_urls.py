from django.urls import include, path

from webapp.core import api

project_api = [
    path("", api.ProjectDetailApi.as_view(), name="api-project"),
    path("members/", api.MemberListApi.as_view(), name="api-members"),
    path("datasets/", include("webapp.datasets.api_urls")),
    path("review/", include("webapp.review.api_urls")),
    path("rewards/", include("webapp.rewards.api_urls")),
    path("jobs/", include("webapp.runs.api_urls")),
    path("monitor/", include("webapp.monitoring.api_urls")),
    path("hooks/", include("webapp.notifications.api_urls")),
]

urlpatterns = [
    path("projects/", api.ProjectListApi.as_view(), name="api-projects"),
    path("invitations/", api.InvitationListApi.as_view(), name="api-invitations"),
    path("invitations/<int:pk>/<str:answer>/", api.InvitationAnswerApi.as_view(), name="api-invitation-answer"),
    path("projects/<slug:slug>/", include(project_api)),
]
