from django.urls import path

from webapp.notifications import api

urlpatterns = [
    path("", api.HookListApi.as_view(), name="api-hooks"),
    path("<int:pk>/", api.HookDetailApi.as_view(), name="api-hook"),
    path("deliveries/", api.DeliveryListApi.as_view(), name="api-deliveries"),
    path("deliveries/<int:pk>/resend/", api.DeliveryResendApi.as_view(), name="api-delivery-resend"),
]
