"""Recompute the review counters of a dataset version from its reviews (repair, or after a bulk load)."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.datasets.models import DatasetVersion
from webapp.review.counters import counters_rebuild
from webapp.review.services import ensure_pair_states


class Command(BaseCommand):
    help = "Recompute the review counters (states, agreement tables, reviewer stats) of a dataset version."

    def add_arguments(self, parser):
        parser.add_argument("version_id", type=int)

    def handle(self, *args, version_id: int, **options):
        version = DatasetVersion.objects.filter(pk=version_id).first()
        if version is None:
            raise CommandError(f"There is no dataset version {version_id}.")
        ensure_pair_states(version=version)
        stats = counters_rebuild(version=version)
        self.stdout.write(f"{version}: {stats.total} pairs, {stats.reviews} reviews, {stats.decided} decided, "
                          f"{stats.n_conflict} conflicts")
