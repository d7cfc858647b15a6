"""The folder broker (the fallback when no Redis is configured), made safe for concurrent processes.

Kombu's filesystem transport creates a message file in the queue folder and then writes into it, so a
reader can claim the empty file first and die on a JSON error; it also claims files by moving them to
the system temp folder, which on another filesystem is a copy that two readers can both make. Here a
message is written in full to a side folder and renamed into the queue (a rename is atomic within one
filesystem), a reader claims it by renaming it into the processed folder (exactly one reader wins), and
a file that still cannot be decoded is set aside with a log line instead of stopping the worker.

Kombu also keeps each exchange's queue table in a file that it creates empty and then locks and fills: a
second worker starting at the same moment could read the empty file and die on a JSON error. Here the
tables change under one lock file and are replaced whole by a rename, so a reader sees an old or a new
table, never a partial one.
"""
from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from queue import Empty

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)


class Channel(filesystem.Channel):
    @property
    def incoming_folder(self) -> str:
        folder = self.transport_options.get("incoming_folder") or os.path.join(self.data_folder_out, "..", "incoming")
        os.makedirs(folder, exist_ok=True)
        return folder

    @property
    def claim_folder(self) -> str:
        folder = self.processed_folder
        os.makedirs(folder, exist_ok=True)
        return folder

    def _read_table(self, file) -> list:
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc
        return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(data))] if data.strip() else []

    def _change_table(self, exchange, change) -> None:
        """Apply `change(queues) -> bool` to an exchange's table under the tables' lock; write when it says so."""
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.control_folder / ".tables.lock", "a") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                queues = self._read_table(file)
                if change(queues):
                    tmp = file.with_name(f".{file.name}.{uuid.uuid4().hex}")
                    tmp.write_bytes(str_to_bytes(dumps(queues)))
                    os.replace(tmp, file)
        except OSError as exc:
            raise ChannelError(f"Cannot update {file}") from exc

    def get_table(self, exchange):
        return self._read_table(self._exchange_file(exchange))

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")

        def add(queues: list) -> bool:
            if entry in queues:
                return False
            queues.insert(0, entry)
            return True

        self._change_table(exchange, add)

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        # The virtual channel's own bookkeeping, then the table (kombu's version rewrites it in place).
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")

        def remove(queues: list) -> bool:
            if entry not in queues:
                return False
            queues.remove(entry)
            return True

        self._change_table(exchange, remove)

    def _put(self, queue, payload, **kwargs):
        # Nanosecond wall-clock names keep FIFO order across processes and restarts.
        name = f"{time.time_ns():020d}_{uuid.uuid4().hex}.{queue}.msg"
        tmp = os.path.join(self.incoming_folder, name)
        try:
            with open(tmp, "wb") as fh:
                fh.write(str_to_bytes(dumps(payload)))
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add message {name!r} to the queue folder") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(self.claim_folder, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except OSError:
                continue  # another reader claimed it first
            try:
                with open(claimed, "rb") as fh:
                    payload = fh.read()
                message = loads(bytes_to_str(payload))
            except (OSError, ValueError) as exc:
                bad = os.path.join(os.path.dirname(self.claim_folder), "bad")
                os.makedirs(bad, exist_ok=True)
                os.replace(claimed, os.path.join(bad, name))
                log.error("Broker message %s is unreadable (%s); moved to %s", name, exc, bad)
                continue
            if not self.store_processed:
                os.remove(claimed)
            return message
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel
    # Folder polling: short enough that a launch is picked up at once, long enough to stay idle-cheap.
    polling_interval = 0.2
