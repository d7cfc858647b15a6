from django.urls import path

from webapp.rewards import api, probe_api

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
    path("<int:pk>/probes/", probe_api.ProbeListApi.as_view(), name="probe-list"),
    path("<int:pk>/probes/scale/", probe_api.ProbeScaleApi.as_view(), name="probe-scale"),
    path("<int:pk>/probes/<int:probe_id>/", probe_api.ProbeDetailApi.as_view(), name="probe-detail"),
    path("<int:pk>/versions/<int:number>/probes/", probe_api.VersionProbesApi.as_view(), name="probes"),
    path("<int:pk>/versions/<int:number>/probes/override/", probe_api.VersionProbeOverrideApi.as_view(),
         name="probe-override"),
]
