"""Log filters: a client's error is one line in the log, not a traceback."""
from __future__ import annotations

import logging


class ClientErrorsOneLine(logging.Filter):
    """Django logs a 4xx it answered for an exception (a PermissionDenied becomes "Forbidden (Permission
    denied): /path") with the exception's whole traceback. Nothing went wrong on the server: keep the status
    line and the reason, drop the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int) and status < 500:
            reason = str(record.exc_info[1] or "")
            record.msg = record.getMessage() + (f" ({reason})" if reason else "")
            record.args = ()
            record.exc_info = record.exc_text = None
        return True
