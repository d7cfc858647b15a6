from django.urls import path

from webapp.datasets import api, quality_api

urlpatterns = [
    path("", api.DatasetListApi.as_view(), name="api-datasets"),
    path("imports/<int:pk>/", api.ImportDetailApi.as_view(), name="api-datasets-import"),
    path("imports/<int:pk>/mapping/", api.ImportMappingApi.as_view(), name="api-datasets-import-mapping"),
    path("imports/<int:pk>/bad-rows/", api.ImportErrorsApi.as_view(), name="api-datasets-import-errors"),
    path("<str:dataset_id>/", api.DatasetDetailApi.as_view(), name="api-dataset"),
    path("<str:dataset_id>/versions/<int:number>/", api.VersionDetailApi.as_view(), name="api-dataset-version"),
    path("<str:dataset_id>/versions/<int:number>/rows/", api.VersionRowsApi.as_view(), name="api-dataset-rows"),
    path("<str:dataset_id>/versions/<int:number>/export/", api.VersionExportApi.as_view(),
         name="api-dataset-export"),
    path("<str:dataset_id>/versions/<int:number>/quality/", quality_api.VersionQualityApi.as_view(),
         name="api-dataset-quality"),
    path("<str:dataset_id>/versions/<int:number>/quality/<int:report_id>/", quality_api.QualityReportApi.as_view(),
         name="api-dataset-quality-report"),
    path("<str:dataset_id>/versions/<int:number>/quality/<int:report_id>/clean/",
         quality_api.QualityCleanApi.as_view(), name="api-dataset-quality-clean"),
]
