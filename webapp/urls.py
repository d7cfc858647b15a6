from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from webapp.core.forms import LoginForm

urlpatterns = [
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),  # for non-HTML pages
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(form_class=LoginForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("webapp.core.api_urls")),
    path("", include("webapp.core.urls")),
]

# The app's styled error pages (with the navigation) and JSON errors for the API: webapp/core/errors.py
handler400 = "webapp.core.errors.bad_request"
handler403 = "webapp.core.errors.permission_denied"
handler404 = "webapp.core.errors.page_not_found"
handler500 = "webapp.core.errors.server_error"
