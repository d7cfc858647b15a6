from django.urls import path

from webapp.monitoring import api, api_arena, api_bundle, api_judges

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
    path("human-evals/<int:task_id>/verdicts/", api.VerdictApi.as_view(), name="api-monitor-verdict"),
    path("human-evals/<int:pk>/judges/", api_judges.HumanEvalJudgesApi.as_view(), name="api-monitor-human-eval-judges"),
    path("arenas/<int:pk>/judges/", api_judges.ArenaJudgesApi.as_view(), name="api-monitor-arena-judges"),
    path("arenas/", api_arena.ArenaListApi.as_view(), name="api-monitor-arenas"),
    path("arenas/<int:arena_id>/", api_arena.ArenaApi.as_view(), name="api-monitor-arena"),
    path("arenas/<int:arena_id>/judgements/", api_arena.ArenaJudgementApi.as_view(), name="api-monitor-arena-judge"),
    path("arenas/<int:arena_id>/export/", api_arena.ArenaExportApi.as_view(), name="api-monitor-arena-export"),
]
