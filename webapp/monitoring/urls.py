from django.urls import path

from webapp.monitoring import views, views_blind, views_bundle, views_samples

urlpatterns = [
    path("jobs/<int:job_id>/", views.job_monitor, name="monitor-job"),
    path("jobs/<int:job_id>/samples/", views_samples.samples, name="monitor-samples"),
    path("jobs/<int:job_id>/checkpoints/", views.checkpoints, name="monitor-checkpoints"),
    path("jobs/<int:job_id>/bundles/", views_bundle.bundle_list, name="monitor-bundles"),
    path("jobs/<int:job_id>/bundles/new/", views_bundle.bundle_create, name="monitor-bundle-create"),
    path("jobs/<int:job_id>/bundles/<int:bundle_id>/download/", views_bundle.bundle_download,
         name="monitor-bundle-download"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/promote/", views.promote, name="monitor-promote"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/rollback/", views.rollback, name="monitor-rollback"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/export/", views.export, name="monitor-export"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/exports/<int:export_id>/", views.export_download,
         name="monitor-export-download"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/evaluate/", views.evaluate, name="monitor-evaluate"),
    path("jobs/<int:job_id>/checkpoints/<int:step>/human-eval/", views.human_eval_create,
         name="monitor-human-eval-create"),
    path("compare/", views.compare, name="monitor-compare"),
    path("human-evals/", views_blind.human_eval_list, name="monitor-human-evals"),
    path("arenas/", views_blind.arena_list, name="monitor-arenas"),
    path("blind/<int:task_id>/", views_blind.blind_detail, name="monitor-blind"),
    path("blind/<int:task_id>/judge/", views_blind.blind_judge, name="monitor-blind-judge"),
    path("blind/<int:task_id>/toggle/", views_blind.blind_toggle, name="monitor-blind-toggle"),
    path("blind/<int:task_id>/assign/", views_blind.blind_assign, name="monitor-blind-assign"),
    path("blind/<int:task_id>/auto-judge/", views_blind.blind_auto_judge, name="monitor-blind-auto-judge"),
    path("blind/<int:task_id>/retry/", views_blind.arena_retry, name="monitor-arena-retry"),
    path("blind/<int:task_id>/export/", views_blind.arena_export_view, name="monitor-arena-export"),
    # addresses of human evaluations before they became blind tasks (their ids were kept)
    path("human-evals/<int:task_id>/", views_blind.legacy, name="monitor-human-eval"),
    path("human-evals/<int:task_id>/review/", views_blind.legacy, {"page": "judge"}),
]
