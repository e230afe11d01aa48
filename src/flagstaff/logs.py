"""Structured JSON logs to stderr, one object per line."""

from __future__ import annotations

import logging
import sys
from typing import Any

import msgspec

logger = logging.getLogger("flagstaff")


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


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("flagstaff")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def log(level: int, msg: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, msg, extra={"fields": fields})
