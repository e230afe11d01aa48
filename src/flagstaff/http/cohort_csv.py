"""Static cohorts from a CSV of distinct ids, as PostHog's cohort API takes them: a
``multipart/form-data`` POST (or PATCH) of ``/cohorts/`` with ``is_static`` and a ``csv`` file.

The CSV's first column holds the distinct ids, one per row (PostHog's rule); when its first
row is a header naming a ``distinct_id`` column, that column is read instead. Ids are
stripped, blank ones skipped, repeats kept once. The form is parsed here with the standard
library (no multipart dependency): the body is split on its boundary, each part's headers read
by :mod:`email`; its fields become the one form Struct,
:class:`~flagstaff.application.cohorts.CohortCsvInput` (which the OpenAPI document shows).
"""

from __future__ import annotations

import asyncio
import csv
import io
from email.message import Message
from email.parser import BytesHeaderParser

import msgspec
from starlette.requests import Request

from flagstaff.application.cohorts import CohortCsvInput
from flagstaff.application.errors import ApiError
from flagstaff.http.rest import MAX_BODY_BYTES
from flagstaff.ingest.normalize import MAX_DISTINCT_ID_LENGTH

MAX_CSV_BYTES = 10 * 1024 * 1024
MAX_CSV_IDS = 200_000
"""Distinct ids one upload may add (they are written in one transaction)."""
TEXT_FIELDS = ("name", "description")
MULTIPART = "multipart/form-data"


class CohortForm(msgspec.Struct, frozen=True):
    """A multipart cohort body: its fields and the CSV's distinct ids (None: no file)."""

    fields: CohortCsvInput
    distinct_ids: list[str] | None


def is_multipart(request: Request) -> bool:
    return request.headers.get("content-type", "").lower().startswith(MULTIPART)


async def _body(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "payload_too_large", f"the upload is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def form_parts(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a multipart/form-data body by field name: (file name or None, bytes).
    ValueError when it is not one."""
    header = Message()
    header["content-type"] = content_type
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not 0 < len(boundary) <= 200:
        raise ValueError("the multipart body has no boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    pieces = body.split(delimiter)
    if len(pieces) < 3:
        raise ValueError("the multipart body has no parts")
    parts: dict[str, tuple[str | None, bytes]] = {}
    for piece in pieces[1:]:
        if piece.startswith(b"--"):
            break  # the closing delimiter
        head, separator, content = piece.partition(b"\r\n\r\n")
        if not separator:
            raise ValueError("a part of the multipart body has no headers")
        headers = BytesHeaderParser().parsebytes(head.lstrip(b"\r\n") + b"\r\n\r\n")
        name = headers.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise ValueError("a part of the multipart body has no field name")
        filename = headers.get_filename()
        parts[name] = (filename, content.removesuffix(b"\r\n"))
    return parts


def read_csv(data: bytes) -> tuple[str, list[str]]:
    """A CSV file's text (UTF-8, a byte order mark dropped) and its distinct ids; ValueError
    names the problem."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("the CSV must be UTF-8 text") from None
    return text, distinct_ids_from_csv(text)


def distinct_ids_from_csv(text: str) -> list[str]:
    """The distinct ids of a CSV file's text (see the module); ValueError names the
    problem."""
    rows = csv.reader(io.StringIO(text, newline=""))
    column = 0
    ids: dict[str, None] = {}
    try:
        for number, row in enumerate(rows, start=1):
            cells = [c.strip() for c in row]
            if not any(cells):
                continue
            if not ids and column == 0 and "distinct_id" in (c.lower() for c in cells):
                column = [c.lower() for c in cells].index("distinct_id")
                continue
            value = cells[column] if column < len(cells) else ""
            if not value:
                continue
            if len(value) > MAX_DISTINCT_ID_LENGTH:
                raise ValueError(
                    f"row {number}: a distinct id has at most {MAX_DISTINCT_ID_LENGTH} characters"
                )
            ids[value] = None
            if len(ids) > MAX_CSV_IDS:
                raise ValueError(f"the CSV names more than {MAX_CSV_IDS} distinct ids")
    except csv.Error as exc:
        raise ValueError(f"the CSV cannot be read: {exc}") from None
    if not ids:
        raise ValueError("the CSV names no distinct ids")
    return list(ids)


def _flag(raw: str, name: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "on", "yes"):
        return True
    if value in ("false", "0", "off", "no", ""):
        return False
    raise ApiError(400, "invalid_input", f"{name} must be true or false", name)


async def read_form(request: Request) -> CohortForm:
    """The multipart cohort body of ``request`` (a 400 naming the field when it is not one)."""
    body = await _body(request, MAX_CSV_BYTES + MAX_BODY_BYTES)
    try:
        parts = await asyncio.to_thread(form_parts, request.headers.get("content-type", ""), body)
    except ValueError as exc:
        raise ApiError(400, "parse_error", str(exc)) from None
    fields: dict[str, str | bool] = {}
    for name in TEXT_FIELDS:
        if name in parts:
            try:
                fields[name] = parts[name][1].decode("utf-8")
            except UnicodeDecodeError:
                raise ApiError(400, "invalid_input", f"{name} must be UTF-8 text", name) from None
    if "is_static" in parts:
        fields["is_static"] = _flag(parts["is_static"][1].decode("latin-1"), "is_static")
    ids = None
    if "csv" in parts:
        data = parts["csv"][1]
        if len(data) > MAX_CSV_BYTES:
            raise ApiError(400, "invalid_input", f"the CSV is over {MAX_CSV_BYTES} bytes", "csv")
        try:  # about 1 ms of CPU per 1,000 ids: read in a thread, not on the event loop
            fields["csv"], ids = await asyncio.to_thread(read_csv, data)
        except ValueError as exc:
            raise ApiError(400, "invalid_input", str(exc), "csv") from None
        if fields.get("is_static") is False:
            raise ApiError(400, "invalid_input", "a CSV makes a static cohort", "is_static")
    return CohortForm(msgspec.convert(fields, CohortCsvInput), ids)
