from django.urls import path

from webapp.review import api

item = "versions/<int:version_id>/items/<int:row_id>/"
urlpatterns = [
    path("versions/", api.VersionListApi.as_view(), name="api-review-versions"),
    path("versions/<int:version_id>/next/", api.NextItemApi.as_view(), name="api-review-next"),
    path("versions/<int:version_id>/prev/", api.PrevItemApi.as_view(), name="api-review-prev"),
    path("versions/<int:version_id>/stats/", api.StatsApi.as_view(), name="api-review-stats"),
    path("versions/<int:version_id>/conflicts/", api.ConflictsApi.as_view(), name="api-review-conflicts"),
    path("versions/<int:version_id>/bulk/", api.BulkApi.as_view(), name="api-review-bulk"),
    path("versions/<int:version_id>/export/", api.ExportApi.as_view(), name="api-review-export"),
    path(item, api.ItemApi.as_view(), name="api-review-item"),
    path(item + "review/", api.SubmitReviewApi.as_view(), name="api-review-submit"),
    path(item + "edit/", api.EditApi.as_view(), name="api-review-edit"),
    path(item + "comments/", api.CommentApi.as_view(), name="api-review-comment"),
    path(item + "resolve/", api.ResolveApi.as_view(), name="api-review-resolve"),
]
