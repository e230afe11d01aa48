"""Structured JSON logs to stderr, one object per line, from the service's first line on.

``flagstaff.access`` is the opt-in access log (one line per request); it has its own level so
that turning it on does not need debug logs, and the app checks one boolean per request when
it is off.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import msgspec

logger = logging.getLogger("flagstaff")
access_logger = logging.getLogger("flagstaff.access")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if extra:
            entry.update(extra)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry).decode()


def configure(level: str, access_log: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("flagstaff")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    access_logger.setLevel(logging.INFO if access_log else logging.WARNING)


def log(level: int, msg: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={"fields": fields})


def always(level: int, msg: str, **fields: Any) -> None:
    """Log whatever the configured level: for what is shown once (a first-start secret)."""
    record = logger.makeRecord(logger.name, level, "", 0, msg, (), None, extra={"fields": fields})
    logger.handle(record)


def access(method: str, path: str, status: int, ms: float, request_id: str) -> None:
    access_logger.info(
        "request",
        extra={
            "fields": {
                "method": method,
                "path": path,
                "status": status,
                "ms": ms,
                "request_id": request_id,
            }
        },
    )
