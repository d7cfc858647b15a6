import re

from webapp.core.access import user_role, visible_projects
from webapp.core.models import Project

# The nav section of a project page, from the path after /p/<slug>/ (the first match wins: the more specific first).
NAV_SECTIONS = (("jobs/models/", "models"), ("monitor/compare/", "compare"), ("monitor/human-evals/", "human-eval"),
                ("monitor/arenas/", "arena"),
                ("monitor/", "jobs"), ("jobs/", "jobs"), ("datasets/", "datasets"), ("review/", "review"),
                ("rewards/", "rewards"))


def nav_section(path: str, slug: str) -> str:
    """"overview" for the project page itself, a section name for pages under it, "" elsewhere."""
    prefix = f"/p/{slug}/"
    if not path.startswith(prefix):
        return ""
    rest = path[len(prefix):]
    if not rest:
        return "overview"
    return next((name for start, name in NAV_SECTIONS if rest.startswith(start)), "")


_PROJECT_PATH = re.compile(r"^/p/(?P<slug>[-\w]+)/")


def project_slug(request) -> str | None:
    """The project a page is in: its URL's slug, or for a path no URL matched (a 404), the /p/<slug>/ prefix."""
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return match.kwargs.get("slug")
    prefix = _PROJECT_PATH.match(request.path)
    return prefix["slug"] if prefix else None


def workbench(request):
    """Expose the current project (from the URL) and the project switcher list to templates."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    slug = project_slug(request)
    current = Project.objects.filter(slug=slug).first() if slug else None
    role = user_role(request.user, current) if current else None
    if role is None:
        current = None
    return {
        "nav_projects": visible_projects(request.user).only("slug", "name"),
        "current_project": current,
        "current_role": role,
        "nav_section": nav_section(request.path, current.slug) if current else "",
    }
