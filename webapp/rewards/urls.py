from django.urls import path

from webapp.rewards import probe_views, views

app_name = "rewards"

urlpatterns = [
    path("", views.reward_list, name="list"),
    path("new/", views.reward_create, name="create"),
    path("models/", views.reward_models, name="models"),
    path("test-runs/<int:pk>/", views.test_run_detail, name="test-run"),
    path("<int:pk>/", views.reward_detail, name="detail"),
    path("<int:pk>/diff/", views.reward_diff, name="diff"),
    path("<int:pk>/test-run/", views.reward_test_run, name="test-run-create"),
    path("<int:pk>/probes/", probe_views.probe_panel, name="probes"),
    path("<int:pk>/probes/add/", probe_views.probe_add, name="probe-add"),
    path("<int:pk>/probes/<int:probe_id>/remove/", probe_views.probe_remove, name="probe-remove"),
    path("<int:pk>/probes/scale/", probe_views.probe_scale, name="probe-scale"),
    path("<int:pk>/probes/run/", probe_views.probe_run, name="probe-run"),
    path("<int:pk>/probes/override/", probe_views.probe_override, name="probe-override"),
]
