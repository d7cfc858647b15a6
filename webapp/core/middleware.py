from django.conf import settings
from django.contrib.auth.views import redirect_to_login

# Paths reachable without a session: the login page, static assets and the token-authenticated API
# (the API answers 401/403 itself).
_OPEN_PREFIXES = ("/login/", "/static/", "/api/", "/healthz", "/admin/login/")


class LoginRequiredMiddleware:
    """Every page requires login."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.user.is_authenticated and not request.path.startswith(_OPEN_PREFIXES):
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return self.get_response(request)
