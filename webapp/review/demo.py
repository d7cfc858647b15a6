"""Demo content of the review app: review states for the demo's preference datasets (idempotent)."""
from __future__ import annotations

from collections.abc import Callable

from webapp.review.selectors import review_versions
from webapp.review.services import ensure_pair_states


def seed_demo(*, project, user, log: Callable[[str], None] = print) -> None:
    for version in review_versions(project):
        had = hasattr(version, "review_stats")
        stats = ensure_pair_states(version=version)
        if not had:
            log(f"review: {stats.total} pairs of {version} ready for review")
