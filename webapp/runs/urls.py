from django.urls import path

from webapp.runs import attach_views, views, views_rescore, zero_signal_views

app_name = "runs"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_new, name="new"),
    path("attach/", attach_views.attach_new, name="attach"),
    path("<int:pk>/attach/stop/", attach_views.attach_stop, name="attach-stop"),
    path("preview/", views.job_preview, name="preview"),
    path("launched/<uuid:token>/", views.job_launched, name="launched"),
    path("models/", views.model_list, name="models"),
    path("<int:pk>/", views.job_detail, name="detail"),
    path("<int:pk>/log/", views.job_log, name="log"),
    path("<int:pk>/cancel/", views.job_cancel, name="cancel"),
    path("<int:pk>/resume/", views.job_resume, name="resume"),
    path("<int:pk>/clone/", views.job_clone, name="clone"),
    path("<int:pk>/register-model/", views.job_register_model, name="register-model"),
    path("<int:pk>/rescores/", views_rescore.rescore_list, name="rescores"),
    path("<int:pk>/rescores/<int:rid>/", views_rescore.rescore_detail, name="rescore"),
    path("zero-signal/version/<int:version_id>/", zero_signal_views.zero_signal_start, name="zero-signal-start"),
    path("zero-signal/<int:run_id>/status/", zero_signal_views.zero_signal_status, name="zero-signal-status"),
    path("zero-signal/<int:run_id>/check/", zero_signal_views.zero_signal_check, name="zero-signal-check"),
    path("zero-signal/<int:run_id>/derive/", zero_signal_views.zero_signal_derive, name="zero-signal-derive"),
]
