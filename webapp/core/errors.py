"""The app's own error answers: styled pages with the navigation (templates/400.html, 403.html, 404.html,
500.html) for browsers, `{"detail": ...}` for the API; never a debug page, never a setting.

Set as Django's handler400/403/404/500 in `webapp/urls.py`; middleware answering a client error itself uses
`error_response` too.
"""
from __future__ import annotations

import logging

from django.http import HttpResponse, JsonResponse
from django.template import loader

from webapp.core.context_processors import project_slug
from webapp.core.models import Invitation
from webapp.core.services import invitations_for

logger = logging.getLogger(__name__)

TITLES = {400: "Bad request", 403: "Not allowed", 404: "Page not found", 413: "Too large",
          500: "Something went wrong"}


def _wants_json(request) -> bool:
    return request.path.startswith("/api/")


def error_response(request, status: int, message: str = "", **context) -> HttpResponse:
    """A client or server error: JSON for the API, the styled page of that status otherwise."""
    if _wants_json(request):
        return JsonResponse({"detail": message or TITLES.get(status, "Error")}, status=status)
    template = f"{status}.html" if status in (400, 403, 404, 500) else "400.html"
    body = loader.render_to_string(template, {"status": status, "title": TITLES.get(status, "Error"),
                                              "message": message, **context}, request=request)
    return HttpResponse(body, status=status)


def bad_request(request, exception=None, template_name="400.html"):
    return error_response(request, 400)


def permission_denied(request, exception=None, template_name="403.html"):
    # the app's PermissionDenied messages say which role a page needs: shown as they are
    return error_response(request, 403, str(exception or ""))


def page_not_found(request, exception=None, template_name="404.html"):
    return error_response(request, 404, invitation=_open_invitation(request))


def server_error(request, template_name="500.html"):
    if _wants_json(request):
        return JsonResponse({"detail": TITLES[500]}, status=500)
    try:
        return error_response(request, 500)
    except Exception:  # noqa: BLE001 - the page of last resort: without the request (no database, no nav)
        logger.exception("the styled 500 page failed; answering without the navigation")
        return HttpResponse(loader.render_to_string("500.html", {"status": 500, "title": TITLES[500]}), status=500)


def _open_invitation(request) -> Invitation | None:
    """The invitation waiting for the signed-in user to the project the missing page is in: someone invited
    who follows a link into the project before accepting sees the invitation, not a dead end."""
    user = getattr(request, "user", None)
    slug = project_slug(request)
    if slug is None or user is None or not user.is_authenticated:
        return None
    return invitations_for(user).filter(project__slug=slug).first()
