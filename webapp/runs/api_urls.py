from django.urls import path

from webapp.runs import api, api_attach, api_rescore, zero_signal_api

urlpatterns = [
    path("", api.JobListApi.as_view(), name="api-jobs"),
    path("models/", api.ModelListApi.as_view(), name="api-models"),
    path("attach/", api_attach.AttachApi.as_view(), name="api-job-attach"),
    path("<int:pk>/attach/stop/", api_attach.AttachStopApi.as_view(), name="api-job-attach-stop"),
    path("<int:pk>/", api.JobDetailApi.as_view(), name="api-job"),
    path("<int:pk>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("<int:pk>/resume/", api.JobResumeApi.as_view(), name="api-job-resume"),
    path("<int:pk>/log/", api.JobLogApi.as_view(), name="api-job-log"),
    path("<int:pk>/rescores/", api_rescore.RescoreListApi.as_view(), name="api-job-rescores"),
    path("<int:pk>/rescores/<int:rid>/", api_rescore.RescoreDetailApi.as_view(), name="api-job-rescore"),
    path("zero-signal/", zero_signal_api.ZeroSignalListApi.as_view(), name="api-zero-signal"),
    path("zero-signal/<int:pk>/", zero_signal_api.ZeroSignalDetailApi.as_view(), name="api-zero-signal-run"),
    path("zero-signal/<int:pk>/derive/", zero_signal_api.ZeroSignalDeriveApi.as_view(),
         name="api-zero-signal-derive"),
]
