from django.urls import path

from webapp.rewards import views

app_name = "rewards"

urlpatterns = [
    path("", views.reward_list, name="list"),
    path("new/", views.reward_create, name="create"),
    path("models/", views.reward_models, name="models"),
    path("test-runs/<int:pk>/", views.test_run_detail, name="test-run"),
    path("<int:pk>/", views.reward_detail, name="detail"),
    path("<int:pk>/diff/", views.reward_diff, name="diff"),
    path("<int:pk>/test-run/", views.reward_test_run, name="test-run-create"),
]
