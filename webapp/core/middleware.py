from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseBadRequest, JsonResponse

# Paths reachable without a session: the login page, static assets and the token-authenticated API
# (the API answers 401/403 itself).
_OPEN_PREFIXES = ("/login/", "/static/", "/api/", "/healthz", "/admin/login/")
# ...except the API's browsable docs, a page: to the login form (the schema itself answers 401).
_CLOSED_PREFIXES = ("/api/docs/",)


class LoginRequiredMiddleware:
    """Every page requires login."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path
        if not request.user.is_authenticated and (not path.startswith(_OPEN_PREFIXES)
                                                  or path.startswith(_CLOSED_PREFIXES)):
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return self.get_response(request)


class OutOfRangeMiddleware:
    """A number too big for the database (an id in a query string, say) is the client's error: 400, not 500.

    Views parse ids with `webapp.core.params`; this is the net under the ones that do not."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, OverflowError):
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": "A number in the request is out of range."}, status=400)
            return HttpResponseBadRequest("A number in the request is out of range.")
        return None


class ContentSecurityPolicyMiddleware:
    """Sends CONTENT_SECURITY_POLICY with every response: scripts only from this site's files (no inline
    scripts or handlers, no eval), nothing framed, no plugins; see settings for the policy itself."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
