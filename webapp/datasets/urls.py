from django.urls import path

from webapp.datasets import quality_views, views

urlpatterns = [
    path("", views.dataset_list, name="datasets"),
    path("upload/", views.upload, name="datasets-upload"),
    path("imports/<int:pk>/", views.import_detail, name="datasets-import"),
    path("imports/<int:pk>/status/", views.import_status, name="datasets-import-status"),
    path("imports/<int:pk>/bad-rows.<str:fmt>", views.import_errors, name="datasets-import-errors"),
    path("<int:dataset_id>/", views.dataset_detail, name="datasets-dataset"),
    path("<int:dataset_id>/v<int:number>/", views.version_detail, name="datasets-version"),
    path("<int:dataset_id>/v<int:number>/rows/<int:index>/", views.row_detail, name="datasets-row"),
    path("<int:dataset_id>/v<int:number>/stats/", views.version_stats, name="datasets-stats"),
    path("<int:dataset_id>/v<int:number>/export/", views.version_export, name="datasets-export"),
    path("<int:dataset_id>/v<int:number>/quality/", quality_views.quality_page, name="datasets-quality"),
    path("<int:dataset_id>/v<int:number>/quality/<int:report_id>/status/", quality_views.quality_status,
         name="datasets-quality-status"),
    path("<int:dataset_id>/v<int:number>/quality/<int:report_id>/clean/", quality_views.quality_clean,
         name="datasets-quality-clean"),
]
