from webapp.core.access import user_role, visible_projects
from webapp.core.models import Project


def workbench(request):
    """Expose the current project (from the URL) and the project switcher list to templates."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    slug = getattr(getattr(request, "resolver_match", None), "kwargs", {}).get("slug")
    current = Project.objects.filter(slug=slug).first() if slug else None
    role = user_role(request.user, current) if current else None
    if role is None:
        current = None
    return {
        "nav_projects": visible_projects(request.user).only("slug", "name"),
        "current_project": current,
        "current_role": role,
    }
