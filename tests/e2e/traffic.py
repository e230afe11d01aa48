"""The HTTP requests an SDK made to Flagstaff, as seen from the SDK's side, in one shape.

posthog-python's requests are recorded with a response hook on its ``requests`` sessions; the
node and browser drivers report theirs as JSON (see ``tooling/e2e_*.mjs``). Bodies are decoded
here independently of the service's own decoder.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from posthog import request as posthog_request


@dataclass(frozen=True)
class SdkRequest:
    method: str
    path: str
    query: dict[str, str]
    status: int
    headers: dict[str, str]
    """Request headers, names lowercased."""
    response_headers: dict[str, str]
    body: bytes

    @classmethod
    def from_report(cls, item: dict[str, Any]) -> SdkRequest:
        """One request as the node drivers report it."""
        parts = urlsplit(item["url"])
        return cls(
            method=item["method"],
            path=parts.path,
            query={k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()},
            status=item["status"],
            headers={k.lower(): v for k, v in item["headers"].items()},
            response_headers={k.lower(): v for k, v in item.get("responseHeaders", {}).items()},
            body=base64.b64decode(item.get("bodyBase64") or ""),
        )

    @property
    def route(self) -> str:
        return self.path.rstrip("/") or "/"

    def encoding(self) -> str:
        """empty, gzip, base64-form or json."""
        if not self.body:
            return "empty"
        if self.body[:2] == b"\x1f\x8b":
            return "gzip"
        if self.body.startswith(b"data="):
            return "base64-form"
        return "json"

    def payload(self) -> Any:
        kind = self.encoding()
        if kind == "empty":
            return None
        if kind == "gzip":
            return json.loads(gzip.decompress(self.body))
        if kind == "base64-form":
            data = parse_qs(self.body.decode("ascii"))["data"][0]
            return json.loads(base64.b64decode(data))
        return json.loads(self.body)

    def event_names(self) -> list[str]:
        payload = self.payload()
        if isinstance(payload, dict):
            payload = payload.get("batch", [payload])
        return [item["event"] for item in payload or []]


class PythonTraffic:
    """Records what posthog-python sends, through its module-level ``requests`` sessions."""

    def __init__(self) -> None:
        self.requests: list[SdkRequest] = []

    def _hook(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        sent = response.request
        parts = urlsplit(sent.url or "")
        body = sent.body or b""
        self.requests.append(
            SdkRequest(
                method=sent.method or "",
                path=parts.path,
                query={k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()},
                status=response.status_code,
                headers={k.lower(): v for k, v in sent.headers.items()},
                response_headers={k.lower(): v for k, v in response.headers.items()},
                body=body.encode() if isinstance(body, str) else body,
            )
        )

    def to(self, route: str) -> list[SdkRequest]:
        return [r for r in self.requests if r.route == route]


@contextmanager
def python_traffic() -> Iterator[PythonTraffic]:
    traffic = PythonTraffic()
    sessions = [posthog_request._get_session(), posthog_request._get_flags_session()]
    for session in sessions:
        session.hooks["response"].append(traffic._hook)
    try:
        yield traffic
    finally:
        for session in sessions:
            session.hooks["response"].remove(traffic._hook)
