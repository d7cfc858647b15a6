from django.urls import path

from webapp.monitoring import api, api_blind, api_bundle

urlpatterns = [
    path("jobs/<int:job_id>/metrics/", api.MetricsApi.as_view(), name="api-monitor-metrics"),
    path("jobs/<int:job_id>/live/", api.LiveApi.as_view(), name="api-monitor-live"),
    path("jobs/<int:job_id>/metric-names/", api.MetricNamesApi.as_view(), name="api-monitor-names"),
    path("jobs/<int:job_id>/events/", api.EventsApi.as_view(), name="api-monitor-events"),
    path("jobs/<int:job_id>/checkpoints/", api.CheckpointListApi.as_view(), name="api-monitor-checkpoints"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/promote/", api.PromoteApi.as_view(), name="api-monitor-promote"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/evaluate/", api.EvaluateApi.as_view(),
         name="api-monitor-evaluate"),
    path("jobs/<int:job_id>/guard-rules/", api.GuardRulesApi.as_view(), name="api-monitor-guard-rules"),
    path("jobs/<int:job_id>/rollback/", api.RollbackApi.as_view(), name="api-monitor-rollback"),
    path("jobs/<int:job_id>/bundles/", api_bundle.BundleListApi.as_view(), name="api-monitor-bundles"),
    path("jobs/<int:job_id>/bundles/<int:bundle_id>/", api_bundle.BundleApi.as_view(), name="api-monitor-bundle"),
    path("jobs/<int:job_id>/bundles/<int:bundle_id>/download/", api_bundle.BundleDownloadApi.as_view(),
         name="api-monitor-bundle-download"),
    path("compare/", api.CompareApi.as_view(), name="api-monitor-compare"),
    path("blind/", api_blind.BlindListApi.as_view(), name="api-monitor-blind-list"),
    path("blind/<int:pk>/", api_blind.BlindApi.as_view(), name="api-monitor-blind"),
    path("blind/<int:pk>/next/", api_blind.BlindNextApi.as_view(), name="api-monitor-blind-next"),
    path("blind/<int:pk>/verdicts/", api_blind.BlindVerdictApi.as_view(), name="api-monitor-blind-verdicts"),
    path("blind/<int:pk>/open/", api_blind.BlindOpenApi.as_view(), name="api-monitor-blind-open"),
    path("blind/<int:pk>/assign/", api_blind.BlindAssignApi.as_view(), name="api-monitor-blind-assign"),
    path("blind/<int:pk>/judges/", api_blind.BlindJudgesApi.as_view(), name="api-monitor-blind-judges"),
    path("blind/<int:pk>/export/", api_blind.ArenaExportApi.as_view(), name="api-monitor-arena-export"),
    path("arenas/", api_blind.ArenaListApi.as_view(), name="api-monitor-arenas"),
]
