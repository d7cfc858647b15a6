"""Kombu's Redis transport, with one change: an entry that is not a message is dropped, not fatal.

Kombu decodes each entry it pops from a queue list as JSON inside the worker's event loop, so a single
malformed entry (written by hand, by an old tool, or cut short) stops the whole worker with an
"Unrecoverable error". Here it is logged and skipped; it was already removed from the list by the pop.
Bodies of real messages that fail to decode are handled by Celery itself (logged and acknowledged).
"""
from __future__ import annotations

import json
import logging
from queue import Empty

from kombu.transport import redis

log = logging.getLogger(__name__)
NOT_A_MESSAGE = (json.JSONDecodeError, UnicodeDecodeError)


class Channel(redis.Channel):
    def _brpop_read(self, **options):
        try:
            return super()._brpop_read(**options)
        except NOT_A_MESSAGE as exc:
            log.error("Dropped a broker queue entry that is not a message: %s", exc)
            raise Empty() from None

    def _get(self, queue):
        try:
            return super()._get(queue)
        except NOT_A_MESSAGE as exc:
            log.error("Dropped an entry of queue %r that is not a message: %s", queue, exc)
            raise Empty() from None


class Transport(redis.Transport):
    Channel = Channel
