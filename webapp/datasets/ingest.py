"""Database side of an import: batched row writes, the split update, duplicate and source counts.

On PostgreSQL rows go in with COPY (several times faster than INSERT); elsewhere with bulk_create.
Batches are committed as they go, so a big import never holds one huge transaction and its progress
is visible to the page polling it; the import service deletes the rows again if the import fails.
"""
from __future__ import annotations

import queue
import threading
from contextlib import contextmanager

import orjson
from django.db import connection, transaction
from django.db.models import Count

from webapp.datasets.fastrows import LINE_COLUMNS, copy_line
from webapp.datasets.models import DatasetRow, Split
from webapp.datasets.shapes import Row

_COPY_COLUMNS = ("version_id", "index", "source_line", "split", "data_source", "ability", "prompt", "chosen",
                 "rejected", "ground_truth", "extra_info", "prompt_text", "chosen_text", "rejected_text",
                 "prompt_chars", "chosen_chars", "rejected_chars", "row_hash")


def _table_columns(columns: tuple[str, ...] = _COPY_COLUMNS) -> tuple[str, str]:
    table = connection.ops.quote_name(DatasetRow._meta.db_table)
    return table, ", ".join(connection.ops.quote_name(c) for c in columns)


def _copy(conn, sql: str, data: bytes) -> None:
    """COPY one batch of ready-made text lines (`fastrows.copy_line`)."""
    with conn.cursor() as cursor, cursor.cursor.copy(sql) as copy:  # the psycopg cursor under Django's
        copy.write(data)


class _CopyWorkers:
    """Threads with their own PostgreSQL connections, each COPYing whole batches: the server's work
    (parsing, TOAST, five indexes) runs on several cores while the caller keeps reading the file.
    The batches arrive as bytes in COPY's text format, so sending them costs these threads almost no
    time under the GIL."""

    def __init__(self, sql: str, workers: int):
        self.sql = sql
        self.queue: queue.Queue = queue.Queue(maxsize=workers)
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, daemon=True, name=f"copy-{i}") for i in range(workers)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        from django.db import connection as conn  # this thread's own connection

        try:
            _session_settings(conn)
            while (batch := self.queue.get()) is not None:
                if not self.errors:
                    try:
                        _copy(conn, self.sql, batch)
                    except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                        self.errors.append(exc)
        except BaseException as exc:  # noqa: BLE001
            self.errors.append(exc)
            while self.queue.get() is not None:  # keep draining so the producer never blocks
                pass
        finally:
            conn.close()

    def put(self, batch: bytes) -> None:
        if self.errors:
            raise self.errors[0]
        self.queue.put(batch)

    def close(self) -> None:
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join()
        if self.errors:
            raise self.errors[0]


class RowWriter:
    """Buffer rows and write them in batches; use as a context manager (it waits for the writes).

    On PostgreSQL rows go in as lines of COPY text built here (`fastrows.copy_line`); elsewhere as plain
    tuples through the driver (executemany on SQLite): the ORM's per-object work (and, under DEBUG,
    its SQL logging) cost more than the database itself. Inside a transaction (tests) PostgreSQL rows
    use the caller's connection, since other connections could not see the uncommitted version they
    belong to.
    """

    def __init__(self, version_id: int, batch_size: int = 2000, workers: int = 2):
        self.version_id = version_id
        self.batch_size = batch_size
        self.vendor = connection.vendor
        self.buffer: list = []
        self.written = 0
        table, cols = _table_columns(LINE_COLUMNS)
        self.sql = f"COPY {table} ({cols}) FROM STDIN"
        table, cols = _table_columns()
        self.insert_sql = f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(_COPY_COLUMNS))})"
        self.workers = None
        if self.vendor == "postgresql" and workers > 0 and not connection.in_atomic_block:
            self.workers = _CopyWorkers(self.sql, workers)

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.workers is not None:
            try:
                self.workers.close()
            except BaseException:
                if exc_type is None:
                    raise

    def add(self, row: Row, index: int, source_line: int, split: str) -> None:
        if self.vendor == "postgresql":
            self.buffer.append(copy_line(self.version_id, index, source_line, split, row))
            if len(self.buffer) >= self.batch_size:
                self.flush()
            return
        self.buffer.append((
            self.version_id, index, source_line, split, row.data_source, row.ability,
            row.column_json("prompt"), row.column_json("chosen"), row.column_json("rejected"), row.ground_truth,
            row.json_texts()["extra_info"],
            row.prompt_text, row.chosen_text, row.rejected_text, len(row.prompt_text), len(row.chosen_text),
            len(row.rejected_text), row.row_hash))
        if len(self.buffer) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        if self.workers is not None:
            self.workers.put(b"".join(self.buffer))
        elif self.vendor == "postgresql":
            _copy(connection, self.sql, b"".join(self.buffer))
        elif self.vendor == "sqlite":
            with transaction.atomic(), connection.cursor() as cursor:  # one commit per buffer
                cursor.cursor.executemany(self.insert_sql, self.buffer)
        else:
            with transaction.atomic():
                DatasetRow.objects.bulk_create([_model(v) for v in self.buffer], batch_size=500)
        self.written += len(self.buffer)
        self.buffer = []

    def discard(self) -> None:
        self.buffer = []


def _model(values: tuple) -> DatasetRow:
    data = dict(zip(_COPY_COLUMNS, values, strict=True))
    for key in ("prompt", "chosen", "rejected", "extra_info"):
        data[key] = orjson.loads(data[key]) if data[key] is not None else None
    return DatasetRow(**data)


def delete_rows(version_id: int) -> None:
    """Delete a version's rows in one statement (no per-row cascade: nothing can refer to them yet)."""
    qs = DatasetRow.objects.filter(version_id=version_id)
    qs._raw_delete(qs.db)


@contextmanager
def fast_commits():
    """On PostgreSQL, skip the fsync wait at each batch commit (an interrupted import is discarded anyway)."""
    if connection.vendor != "postgresql":
        yield
        return
    _session_settings(connection)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")
            cursor.execute("RESET default_toast_compression")


def _session_settings(conn) -> None:
    """No fsync wait at each batch commit; long values compressed with LZ4 where the server has it
    (several times faster than the default pglz, and the table's reads decompress either)."""
    with conn.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO OFF")
        cursor.execute("SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
                       "AND 'lz4' = ANY(enumvals)")
        if cursor.fetchone():  # a server built without LZ4 keeps its default
            cursor.execute("SET default_toast_compression TO lz4")


def reset_split(version_id: int) -> None:
    DatasetRow.objects.filter(version_id=version_id, split=Split.VAL).update(split=Split.TRAIN)


def mark_val(version_id: int, indices: list[int], chunk: int = 2000) -> None:
    for start in range(0, len(indices), chunk):
        DatasetRow.objects.filter(version_id=version_id, index__in=indices[start:start + chunk]).update(
            split=Split.VAL)


def duplicate_summary(version_id: int, prefixes, examples: int = 20) -> dict:
    """Exact duplicates (same prompt, responses and ground truth), found from the rows' hash prefixes.

    `prefixes` holds the first 64 bits of each row's hash in row order (8 bytes a row, collected while
    reading); sorting them finds the duplicate groups without a GROUP BY over every row, and the members
    of the groups shown are found in the same array. Their full hashes and source lines are then read by
    (version, index), so the table needs no index on the hash (one index less to fill on every import).
    """
    import numpy as np

    arr = np.frombuffer(prefixes, dtype=np.uint64) if len(prefixes) else np.zeros(0, dtype=np.uint64)
    if arr.size < 2:
        return {"groups": 0, "rows": 0, "examples": []}
    order = np.argsort(arr, kind="stable")
    ordered = arr[order]
    same = ordered[1:] == ordered[:-1]  # position i+1 repeats position i
    starts = np.flatnonzero(same & ~np.concatenate(([False], same[:-1])))  # first pair of each group
    first_indexes = np.sort(order[starts])[:examples]  # stable sort: order[start] is the group's first row
    groups = [np.flatnonzero(arr == arr[index]).tolist() for index in first_indexes.tolist()]
    wanted = sorted({index for group in groups for index in group[:10]} | {g[0] for g in groups})
    rows = DatasetRow.objects.filter(version_id=version_id, index__in=wanted)
    found, lines = {}, {}
    for index, row_hash, source_line in rows.values_list("index", "row_hash", "source_line"):
        found[index], lines[index] = row_hash, source_line
    shown = []
    for group in groups:
        full = found.get(group[0])
        members = [i for i in group if found.get(i, full) == full]  # a 64-bit prefix match, checked in full
        shown.append({"count": len(members), "indexes": members[:10], "lines": [lines.get(i, 0) for i in members[:10]]})
    return {"groups": int(starts.size), "rows": int(same.sum()), "examples": shown}


def data_source_counts(version_id: int, top: int = 50, counted: dict[str, int] | None = None) -> dict:
    """The most common data sources; `counted` (tallied while reading) spares a scan of the rows."""
    if counted is not None:
        items = sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
        return {"distinct": len(items), "top": dict(items[:top])}
    qs = (DatasetRow.objects.filter(version_id=version_id).values("data_source").annotate(n=Count("id"))
          .order_by("-n", "data_source"))
    return {"distinct": qs.count(), "top": {r["data_source"]: r["n"] for r in qs[:top]}}
