"""SQLite under the app's own concurrency: several processes read-then-write at once, none sees 'database is locked'.

With SQLite's default deferred transactions, two processes that both read and then write inside a transaction
deadlock on the lock upgrade and one fails at once (the busy timeout is not applied to that case); the settings
begin every transaction IMMEDIATE, in WAL mode, with a busy timeout.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.db import connection

from webapp.core.models import Project

ROOT = Path(__file__).resolve().parents[2]
WRITERS, ROUNDS = 4, 40

WRITER = textwrap.dedent("""
    import os, sys, time
    import django
    django.setup()
    from django.db import OperationalError, connection, transaction
    from webapp.core.models import Project

    pk, me = int(sys.argv[1]), sys.argv[2]
    errors = done = 0
    for i in range(ROUNDS):
        try:
            with transaction.atomic():  # read, think a little, then write: the lock-upgrade pattern
                name = Project.objects.filter(pk=pk).values_list("description", flat=True).get()
                time.sleep(0.002)
                Project.objects.filter(pk=pk).update(description=(name + me)[-200:])
            done += 1
            if i % 2:
                connection.close()  # a new connection per request, as the web server does
        except OperationalError as exc:
            errors += 1
            print("ERR", exc, flush=True)
    print("DONE", done, errors, flush=True)
""").replace("ROUNDS", str(ROUNDS))


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite settings only")
def test_concurrent_read_then_write_transactions_never_hit_database_is_locked(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
    project = Project.objects.create(slug="locks", name="Locks", description="")
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(project.pk), str(i)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(WRITERS)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all("DONE" in out for out in outputs), outputs
    assert not any("database is locked" in out for out in outputs), "\n".join(outputs)[-3000:]
    assert [out.split("DONE")[1].split() for out in outputs] == [[str(ROUNDS), "0"]] * WRITERS
