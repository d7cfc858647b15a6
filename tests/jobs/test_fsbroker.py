"""The folder broker under concurrent writers and readers: every message arrives once and whole."""
from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest
from kombu import Connection

TRANSPORT = "jobs.fsbroker:Transport"
WRITERS, READERS, PER_WRITER = 3, 3, 40
# Big enough that writing one takes several system calls' time: a reader racing the writer sees it half done.
PAD = "x" * 300_000


def _options(root: Path) -> dict:
    folders = {k: root / k for k in ("queue", "processed", "control", "incoming")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {"data_folder_in": str(folders["queue"]), "data_folder_out": str(folders["queue"]),
            "processed_folder": str(folders["processed"]), "control_folder": str(folders["control"]),
            "incoming_folder": str(folders["incoming"]), "store_processed": False}


def _writer(transport: str, root: str, writer: int) -> None:
    with Connection("filesystem://", transport=transport, transport_options=_options(Path(root))) as conn:
        channel = conn.channel()
        for i in range(PER_WRITER):
            channel._put("q", {"body": f"{writer}-{i}", "pad": PAD})


def _reader(transport: str, root: str, out, stop) -> None:
    from queue import Empty

    got, errors = [], []
    with Connection("filesystem://", transport=transport, transport_options=_options(Path(root))) as conn:
        channel = conn.channel()
        while True:
            try:
                message = channel._get("q")
            except Empty:
                if stop.is_set():
                    break
                continue
            except Exception as exc:  # what killed the worker: a half-written file read as JSON
                errors.append(repr(exc))
                continue
            got.append(message["body"] if message.get("pad") == PAD else f"TRUNCATED:{message.get('body')}")
    out.put((got, errors))


def _exchange(transport: str, root: Path) -> tuple[list[str], list[str]]:
    ctx = mp.get_context("fork")
    out, stop = ctx.Queue(), ctx.Event()
    readers = [ctx.Process(target=_reader, args=(transport, str(root), out, stop)) for _ in range(READERS)]
    writers = [ctx.Process(target=_writer, args=(transport, str(root), w)) for w in range(WRITERS)]
    for proc in readers + writers:
        proc.start()
    for proc in writers:
        proc.join(60)
    stop.set()
    got, errors = [], []
    for _ in readers:
        g, e = out.get(timeout=60)
        got += g
        errors += e
    for proc in readers:
        proc.join(10)
    return got, errors


def test_concurrent_writers_and_readers_lose_duplicate_or_truncate_nothing(tmp_path):
    got, errors = _exchange(TRANSPORT, tmp_path)
    expected = {f"{w}-{i}" for w in range(WRITERS) for i in range(PER_WRITER)}
    assert errors == []
    assert len(got) == len(expected) and set(got) == expected  # none lost, none twice, none cut short
    assert os.listdir(tmp_path / "queue") == [] and os.listdir(tmp_path / "incoming") == []


def test_an_unreadable_message_is_set_aside_and_the_next_one_delivered(tmp_path, caplog):
    options = _options(tmp_path)
    with Connection("filesystem://", transport=TRANSPORT, transport_options=options) as conn:
        channel = conn.channel()
        (tmp_path / "queue" / f"{0:020d}_bad.q.msg").write_bytes(b'{"half": ')
        channel._put("q", {"body": "good"})
        assert channel._get("q") == {"body": "good"}
        from queue import Empty

        with pytest.raises(Empty):
            channel._get("q")
    assert os.listdir(tmp_path / "bad") == [f"{0:020d}_bad.q.msg"]
    assert "unreadable" in caplog.text


def _binder(transport: str, root: str, worker: int, start, out) -> None:
    errors = []
    with Connection("filesystem://", transport=transport, transport_options=_options(Path(root))) as conn:
        channel = conn.channel()
        start.wait(30)
        for i in range(BIND_ROUNDS):
            try:  # two workers starting at once declare the same exchange's queues (cpu and usercode)
                channel._queue_bind(f"x{i}", f"w{worker}", "", f"w{worker}")
                channel.get_table(f"x{i}")
            except Exception as exc:
                errors.append(repr(exc))
    out.put(errors)


BIND_ROUNDS, BINDERS = 60, 4


def test_workers_declaring_queues_at_once_see_whole_exchange_tables(tmp_path):
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_binder, args=(TRANSPORT, str(tmp_path), w, start, out)) for w in range(BINDERS)]
    for proc in procs:
        proc.start()
    start.set()
    errors = [e for _ in procs for e in out.get(timeout=120)]
    for proc in procs:
        proc.join(30)
    assert errors == []
    with Connection("filesystem://", transport=TRANSPORT, transport_options=_options(tmp_path)) as conn:
        channel = conn.channel()
        for i in range(BIND_ROUNDS):
            assert sorted(q.queue for q in channel.get_table(f"x{i}")) == [f"w{w}" for w in range(BINDERS)]
