"""The project page: what the project holds, its recent jobs, and the first steps a new team takes."""
from __future__ import annotations

from django.shortcuts import render

from webapp.core.access import project_access
from webapp.datasets.models import Dataset
from webapp.overview.onboarding import first_steps, next_step
from webapp.rewards.models import RewardFunction
from webapp.runs.models import Job


def project_detail(request, slug):
    access = project_access(request.user, slug)
    project = access.project
    steps = first_steps(project)
    context = {"project": project, "access": access, "overview": _overview(project), "steps": steps,
               "next_step": next_step(steps)}
    return render(request, "overview/project.html", context)


def _overview(project) -> dict:
    return {
        "datasets": Dataset.objects.filter(project=project).count(),
        "rewards": RewardFunction.objects.filter(project=project).count(),
        "jobs": Job.objects.filter(project=project).count(),
        "recent_jobs": Job.objects.filter(project=project).order_by("-created_at")[:5],
        "members": project.memberships.count(),
    }
