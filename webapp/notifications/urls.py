from django.urls import path

from webapp.notifications import views

urlpatterns = [
    path("", views.hooks_page, name="notifications"),
    path("hooks/<int:pk>/delete/", views.hook_delete, name="hook-delete"),
    path("hooks/<int:pk>/test/", views.hook_test, name="hook-test"),
    path("deliveries/<int:pk>/resend/", views.delivery_resend, name="delivery-resend"),
]
