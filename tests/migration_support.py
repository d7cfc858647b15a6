"""Run one app's migrations back and forth in a test: the other apps stay at their latest migration."""
from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_app_to(node: tuple[str, str] | None):
    """Every app at its latest migration but `node`'s app, which is at `node` (None: every app at its latest);
    returns the models as they are there."""
    executor = MigrationExecutor(connection)
    targets = executor.loader.graph.leaf_nodes()
    if node is not None:
        targets = [n for n in targets if n[0] != node[0]] + [node]
    executor.migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps
