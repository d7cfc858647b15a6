from django.urls import path

from webapp.monitoring import views, views_arena, views_bundle, views_samples

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
    path("human-evals/", views.human_eval_list, name="monitor-human-evals"),
    path("human-evals/<int:task_id>/", views.human_eval_detail, name="monitor-human-eval"),
    path("human-evals/<int:task_id>/review/", views.human_eval_review, name="monitor-human-eval-review"),
    path("human-evals/<int:task_id>/judge/", views.human_eval_auto_judge, name="monitor-human-eval-judge"),
    path("human-evals/<int:task_id>/toggle/", views.human_eval_toggle, name="monitor-human-eval-toggle"),
    path("arenas/", views_arena.arena_list, name="monitor-arenas"),
    path("arenas/<int:arena_id>/", views_arena.arena_detail, name="monitor-arena"),
    path("arenas/<int:arena_id>/judge/", views_arena.arena_judge, name="monitor-arena-judge"),
    path("arenas/<int:arena_id>/auto-judge/", views.arena_auto_judge, name="monitor-arena-auto-judge"),
    path("arenas/<int:arena_id>/toggle/", views_arena.arena_toggle, name="monitor-arena-toggle"),
    path("arenas/<int:arena_id>/retry/", views_arena.arena_retry, name="monitor-arena-retry"),
    path("arenas/<int:arena_id>/export/", views_arena.arena_export_view, name="monitor-arena-export"),
]
