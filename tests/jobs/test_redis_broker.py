"""The Redis broker (./run's default, on a private unix socket): a queue entry that is not a message is
dropped with a log line; the worker lives on and runs the next task."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from kombu import Connection

from jobs.celery import app
from webapp.core.models import AuditLog, Project

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")


@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of this test's own, on a unix socket (as ./run starts it)."""
    import redis

    sock = tmp_path / "r.sock"
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    client = redis.Redis(unix_socket_path=str(sock))
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            client.ping()
            break
        except (redis.ConnectionError, FileNotFoundError):
            time.sleep(0.05)
    yield f"redis+socket://{sock}", client
    proc.terminate()
    proc.wait(10)


def test_the_redis_transport_drops_what_is_not_a_message(private_redis):
    url, client = private_redis
    with Connection(url) as conn:
        assert type(conn.transport).__module__ == "jobs.redisbroker"
        channel = conn.channel()
        client.lpush("q", b'{"half": ')
        channel._put("q", {"body": "good"})
        from queue import Empty

        with pytest.raises(Empty):
            channel._get("q")  # the broken entry: dropped
        assert channel._get("q") == {"body": "good"}


@pytest.mark.worker
def test_a_worker_survives_a_broken_queue_entry_and_runs_the_next_task(private_redis, monkeypatch, request,
                                                                      transactional_db):
    url, client = private_redis
    monkeypatch.setenv("REDIS_URL", url)
    proc = request.getfixturevalue("celery_worker_proc")
    client.lpush("cpu", b'{"body": "cut sho')
    project = Project.objects.create(slug="after-bad", name="After a bad entry")
    with Connection(url) as conn:
        app.send_task("jobs.tasks.ping", args=[project.pk], connection=conn)
    deadline = time.time() + 120
    while time.time() < deadline and not AuditLog.objects.filter(action="worker.ping", project=project).exists():
        time.sleep(0.2)
    log = proc.log_path.read_text()
    assert proc.poll() is None, log[-3000:]
    assert AuditLog.objects.filter(action="worker.ping", project=project).exists(), log[-3000:]
    assert "not a message" in log and "Unrecoverable error" not in log
