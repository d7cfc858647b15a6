from django.urls import path

from webapp.review import views

urlpatterns = [
    path("", views.index, name="review-index"),
    path("v/<int:version_id>/", views.screen, name="review-screen"),
    path("v/<int:version_id>/pairs/", views.pairs, name="review-pairs"),
    path("v/<int:version_id>/stats/", views.stats, name="review-stats"),
    path("v/<int:version_id>/conflicts/", views.conflicts, name="review-conflicts"),
    path("v/<int:version_id>/items/<int:row_id>/", views.item, name="review-item"),
    path("v/<int:version_id>/release/", views.release, name="review-release"),
    path("v/<int:version_id>/export/", views.export, name="review-export"),
]
