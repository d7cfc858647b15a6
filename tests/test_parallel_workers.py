"""`./test` runs pytest-xdist workers; each must have its own var folder, test database and Redis database."""
from __future__ import annotations

import os

import pytest
from django.conf import settings

from tests.conftest import redis_db_url


def test_redis_url_moves_to_the_workers_database():
    assert redis_db_url("redis://127.0.0.1:6379/0", 2) == "redis://127.0.0.1:6379/2"
    assert redis_db_url("redis://127.0.0.1:6379", 1) == "redis://127.0.0.1:6379/1"
    assert redis_db_url("redis://:pw@h:6379/9?socket_timeout=5", 2) == "redis://:pw@h:6379/11?socket_timeout=5"
    with pytest.raises(pytest.UsageError, match="database 16"):
        redis_db_url("redis://h/15", 1)
    with pytest.raises(pytest.UsageError, match="redis://"):
        redis_db_url("redis+socket:///var/redis.sock", 1)


@pytest.mark.skipif("PYTEST_XDIST_WORKER" not in os.environ, reason="only under pytest -n N")
def test_each_worker_has_its_own_var_folder_and_test_database(db):
    from django.db import connection

    worker = os.environ["PYTEST_XDIST_WORKER"]
    assert settings.VAR_DIR.name == f"xdist-{worker}"
    assert str(connection.settings_dict["NAME"]).endswith(worker)
