from django.urls import path

from webapp.overview import views

urlpatterns = [
    path("", views.project_detail, name="project"),
]
