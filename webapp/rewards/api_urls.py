from django.urls import path

from webapp.rewards import api

app_name = "rewards-api"

urlpatterns = [
    path("", api.RewardListApi.as_view(), name="list"),
    path("check/", api.SourceCheckApi.as_view(), name="check"),
    path("templates/", api.TemplateListApi.as_view(), name="templates"),
    path("models/", api.RewardModelListApi.as_view(), name="models"),
    path("test-runs/<int:pk>/", api.RewardTestRunDetailApi.as_view(), name="test-run-detail"),
    path("<int:pk>/", api.RewardDetailApi.as_view(), name="detail"),
    path("<int:pk>/versions/", api.RewardVersionListApi.as_view(), name="versions"),
    path("<int:pk>/versions/<int:number>/", api.RewardVersionDetailApi.as_view(), name="version"),
    path("<int:pk>/test-run/", api.RewardTestRunCreateApi.as_view(), name="test-run"),
]
