import logging

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import RequestDataTooBig

from webapp.core import jsonsafe
from webapp.core.errors import error_response

logger = logging.getLogger(__name__)

# Paths reachable without a session: the login page, static assets, the token-authenticated API (the API
# answers 401/403 itself) and invitation links (someone invited may not have an account yet).
_OPEN_PREFIXES = ("/login/", "/static/", "/api/", "/healthz", "/admin/login/", "/join/")
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
            return error_response(request, 400, "A number in the request is out of range.")
        return None


class JSONBodyMiddleware:
    """Every JSON body is checked here before any view parses it, DRF or plain: nested deeper than
    `jsonsafe.MAX_DEPTH` levels it is a 400 (parsing it would recurse until a RecursionError), bigger than
    DATA_UPLOAD_MAX_MEMORY_SIZE a 413.

    The net under JSON that arrives another way (inside a form field that a view parses by hand): a
    RecursionError is the client's deeply nested input, a 400 too, and logged."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "json" in (request.content_type or "") and request.META.get("CONTENT_LENGTH") not in (None, "", "0"):
            try:
                body = request.body
            except RequestDataTooBig:
                limit_mb = settings.DATA_UPLOAD_MAX_MEMORY_SIZE / 2**20
                return error_response(request, 413, f"A JSON body may be at most {limit_mb:g} MB.")
            if jsonsafe.too_deep(body):
                return error_response(request, 400, str(jsonsafe.JSONTooDeep()))
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, RecursionError):
            logger.warning("RecursionError on %s %s (input nested too deeply?)", request.method, request.path,
                           exc_info=exception)
            return error_response(request, 400, "The request is nested too deeply to read.")
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
