"""Request body decoding for the capture endpoints.

Bodies arrive as raw JSON, gzip (announced or only recognisable by its magic bytes), zlib
deflate, LZ-string base64 (`lz64`), plain base64, or a form `data=<...>` field holding any of
those. Every decoded layer is bounded by `limit`: gzip and deflate are inflated with a capped
output size, so a compression bomb costs no more than `limit` bytes of memory.

The parsed JSON is safe downstream: `\\u0000` escapes and lone surrogate escapes become U+FFFD
before parsing, and invalid UTF-8 bytes are replaced, so every string encodes as UTF-8 and none
holds a NUL. Non-standard `NaN`/`Infinity` literals (Python's `json.dumps` emits them) become null.

:func:`decode_body` answers the JSON value (capture takes any shape); :func:`body_json` the
JSON text, which :func:`decode_as` decodes straight into a msgspec type (a /flags body) with
the same values as :func:`parse_json` would give.
"""

from __future__ import annotations

import binascii
import json
import math
import re
import zlib
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

import msgspec
import orjson

__all__ = [
    "PayloadError",
    "body_json",
    "decode_as",
    "decode_body",
    "decode_query_data",
    "parse_json",
]

T = TypeVar("T")

_GZIP_MAGIC = b"\x1f\x8b"
_JSON_STARTS = frozenset(b"{[")
_MAX_LAYERS = 4

_GZIP = "gzip"
_DEFLATE = "deflate"
_LZ64 = "lz64"
_BASE64 = "base64"
_HINTS: dict[str, str] = {
    "gzip": _GZIP,
    "gzip-js": _GZIP,
    "x-gzip": _GZIP,
    "deflate": _DEFLATE,
    "lz64": _LZ64,
    "lz-string": _LZ64,
    "base64": _BASE64,
    "b64": _BASE64,
}

_FORM_MIME = "application/x-www-form-urlencoded"
_JSON_MIME = "application/json"
_FORM_PREFIX = re.compile(rb"(?:^|&)(?:data|compression|ver|_|ip)=")
_B64_CHARS = re.compile(rb"[A-Za-z0-9+/=_\-\s]*")
_B64_LOOSE_CHARS = re.compile(rb"[A-Za-z0-9+/= ]*")
_WHITESPACE = b" \t\r\n"
_URLSAFE_TO_STD = bytes.maketrans(b"-_", b"+/")
_CHECK_PREFIX = 128

# One JSON escape at a time, so an escaped backslash (`\\`) is consumed as a unit and the
# `u0000` in `\\u0000` is never taken for an escape. Group 1: a high surrogate escape, group 2:
# the low surrogate escape that follows it (a valid pair), group 3: a lone low surrogate,
# group 4: a NUL escape.
_RISKY_ESCAPE = re.compile(
    rb"\\\\"
    rb"|(\\u[dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|(\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(\\u0000)"
)
_REPLACEMENT_ESCAPE = b"\\ufffd"
_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1


class PayloadError(Exception):
    """A request body that cannot be decoded (400) or is too large (413)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


def _too_large(what: str, limit: int) -> PayloadError:
    return PayloadError(413, "payload_too_large", f"{what} exceeds the limit of {limit} bytes")


def decode_body(
    body: bytes,
    *,
    content_type: str | None,
    content_encoding: str | None,
    query: Mapping[str, str],
    limit: int,
) -> Any:
    """Decode a capture request body into its JSON value."""
    return parse_json(
        body_json(
            body,
            content_type=content_type,
            content_encoding=content_encoding,
            query=query,
            limit=limit,
        )
    )


def body_json(
    body: bytes,
    *,
    content_type: str | None,
    content_encoding: str | None,
    query: Mapping[str, str],
    limit: int,
) -> bytes:
    """The JSON text of a request body, its encoding layers (form, gzip, deflate, lz64,
    base64) peeled; not yet parsed (:func:`parse_json`, :func:`decode_as`)."""
    if len(body) > limit:
        raise _too_large(f"request body of {len(body)} bytes", limit)
    if not body:
        raise PayloadError(400, "empty_body", "request body is empty")
    hint = _hint(query.get("compression"))
    data = body
    if body[0] not in _JSON_STARTS and body[:2] != _GZIP_MAGIC and _is_form(body, content_type):
        fields = _parse_form(body)
        form_data = fields.get("data")
        if not form_data:
            raise PayloadError(400, "missing_data", "form body has no data field")
        data = _restore_plus(form_data)
        if hint is None:
            hint = _hint(fields.get("compression", b"").decode("ascii", "replace"))
    if hint is None:
        hint = _hint(content_encoding)
    try:
        return _unwrap(data, hint, limit)
    except PayloadError as exc:
        if exc.code == "invalid_base64" and hint is None and _is_json_type(content_type):
            # Text labelled as JSON that is neither JSON nor a known encoding: say so.
            raise PayloadError(400, "invalid_json", "body is not valid JSON") from None
        raise


def decode_query_data(query: Mapping[str, str], limit: int) -> Any | None:
    """Decode the legacy `GET /e/?data=...&compression=...` payload; None without `data`."""
    raw = query.get("data")
    if not raw:
        return None
    data = raw.encode("utf-8", "replace")
    if len(data) > limit:
        raise _too_large(f"query data of {len(data)} bytes", limit)
    return parse_json(_unwrap(_restore_plus(data), _hint(query.get("compression")), limit))


def _hint(value: str | None) -> str | None:
    if not value:
        return None
    return _HINTS.get(value.strip().lower())


def _is_json_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == _JSON_MIME


def _is_form(body: bytes, content_type: str | None) -> bool:
    prefix = body[:_CHECK_PREFIX]
    if _FORM_PREFIX.search(prefix) is not None:
        return True
    # A body labelled as a form must still look like one: `curl -d '{...}'` labels JSON so.
    return bool(
        content_type
        and content_type.split(";", 1)[0].strip().lower() == _FORM_MIME
        and b"=" in prefix
        and _B64_CHARS.fullmatch(prefix) is None
    )


def _parse_form(body: bytes) -> dict[str, bytes]:
    fields: dict[str, bytes] = {}
    for part in body.split(b"&"):
        key, _, value = part.partition(b"=")
        name = unquote_to_bytes(key.replace(b"+", b" ")).decode("utf-8", "replace")
        if name not in fields:
            fields[name] = unquote_to_bytes(value.replace(b"+", b" "))
    return fields


def _restore_plus(data: bytes) -> bytes:
    """Form and query decoding turn a literal `+` into a space: undo it for base64 text."""
    if b" " in data and _B64_LOOSE_CHARS.fullmatch(data[:_CHECK_PREFIX]) is not None:
        return data.replace(b" ", b"+")
    return data


def _unwrap(data: bytes, hint: str | None, limit: int) -> bytes:
    """Peel encoding layers (gzip, deflate, lz64, base64) until JSON text is left."""
    lz_done = deflate_done = b64_done = False
    for _ in range(_MAX_LAYERS):
        if data[:2] == _GZIP_MAGIC:
            data = _inflate(data, 31, limit, "invalid_gzip")
            continue
        if not data:
            break
        first = data[0]
        if first in _JSON_STARTS:
            return data
        if first in _WHITESPACE or first == 0xEF:
            start = 0
            while start < len(data) and data[start] in _WHITESPACE:
                start += 1
            if data[start : start + 3] == b"\xef\xbb\xbf":
                start += 3
            if start and data[start : start + 1] in (b"{", b"["):
                return data[start:]
        if hint == _DEFLATE and not deflate_done and _is_zlib_header(data):
            deflate_done = True
            data = _inflate(data, 15, limit, "invalid_deflate")
            continue
        if hint == _LZ64 and not lz_done:
            lz_done = True
            data = _lz64_decompress(data, limit)
            continue
        if _looks_base64(data) or (hint == _BASE64 and not b64_done):
            b64_done = True
            data = _b64decode(data)
            continue
        if hint == _GZIP:
            raise PayloadError(400, "invalid_gzip", "body announced as gzip is not gzip data")
        break
    return data


def _is_zlib_header(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


_FEED_START = 32
MAX_GZIP_MEMBERS = 1000
"""SDKs send one gzip member; concatenated members are legal, but not by the thousand."""
_FEED_MAX = 64 * 1024


def _inflate(data: bytes, wbits: int, limit: int, code: str) -> bytes:
    """Inflate gzip (wbits 31, every member) or zlib (wbits 15) data to at most `limit` bytes.

    The input is fed in slices that start small and double while a member goes on, so what
    zlib copies back as `unused_data` at the end of each member is never more than twice what
    that member consumed: the cost stays linear in the input however many members it holds.
    """
    kind = "gzip" if wbits == 31 else "deflate"
    view = memoryview(data)
    parts: list[bytes] = []
    produced = 0
    pos = 0
    members = 0
    while True:
        inflater = zlib.decompressobj(wbits)
        feed = _FEED_START
        while not inflater.eof:
            if pos >= len(data):
                raise PayloadError(400, code, f"truncated {kind} data")
            end = min(pos + feed, len(data))
            try:
                # max_length is at least 1 here: 0 would mean "no limit".
                chunk = inflater.decompress(view[pos:end], limit + 1 - produced)
            except zlib.error:
                raise PayloadError(400, code, f"corrupt {kind} data") from None
            if inflater.unconsumed_tail:
                # Output hit the cap before this slice was used up.
                raise _too_large(f"decompressed {kind} body", limit)
            produced += len(chunk)
            if produced > limit:
                raise _too_large(f"decompressed {kind} body", limit)
            if chunk:
                parts.append(chunk)
            pos = end - len(inflater.unused_data)
            feed = min(feed * 2, _FEED_MAX)
        if wbits != 31 or data[pos : pos + 2] != _GZIP_MAGIC:
            break
        members += 1
        if members >= MAX_GZIP_MEMBERS:
            raise PayloadError(400, code, f"gzip body has over {MAX_GZIP_MEMBERS} members")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _looks_base64(data: bytes) -> bool:
    return _B64_CHARS.fullmatch(data[:_CHECK_PREFIX]) is not None


def _b64decode(data: bytes) -> bytes:
    try:
        return binascii.a2b_base64(data, strict_mode=True)
    except binascii.Error:
        pass
    # Not canonical: line breaks, the URL-safe alphabet, or missing padding.
    compact = data.translate(None, b" \t\r\n")
    if b"-" in compact or b"_" in compact:
        compact = compact.translate(_URLSAFE_TO_STD)
    compact = compact.rstrip(b"=")
    if len(compact) % 4 == 1:
        raise PayloadError(400, "invalid_base64", "base64 body has an impossible length")
    compact += b"=" * (-len(compact) % 4)
    try:
        return binascii.a2b_base64(compact, strict_mode=True)
    except binascii.Error:
        raise PayloadError(400, "invalid_base64", "corrupt base64 body") from None


# LZ-string reads its bit stream least significant bit first, from 6-bit characters taken most
# significant bit first. Base64 decoding yields the same bits most significant first per byte, so
# bit-reversing each byte turns the stream into a plain little-endian integer stream.
_REVERSED_BITS = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))
_LZ_END = 2


def _lz64_decompress(data: bytes, limit: int) -> bytes:
    """Decode LZ-string `compressToBase64` output, producing at most `limit` characters."""
    # lz-string pads its base64 to a multiple of four with `=` even after 4k+1 characters, which
    # standard base64 cannot express: pad the characters with zero bits ("A") instead.
    text = data.translate(None, b" \t\r\n").rstrip(b"=")
    text += b"A" * (-len(text) % 4)
    try:
        stream = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        raise PayloadError(400, "invalid_lz64", "lz64 body is not base64 text") from None
    if not stream:
        raise PayloadError(400, "invalid_lz64", "lz64 body is empty")
    bits = stream.translate(_REVERSED_BITS) + bytes(5)
    total_bits = len(stream) * 8
    from_bytes = int.from_bytes
    corrupt = PayloadError(400, "invalid_lz64", "corrupt lz64 data")

    # Each read of `width` bits: (5 bytes from pos // 8, little-endian) >> pos % 8, masked.
    kind = bits[0] & 3
    pos = 2
    if kind == _LZ_END:
        return b""
    if kind > _LZ_END:
        raise corrupt
    width = 16 if kind else 8
    first = chr((from_bytes(bits[0:5], "little") >> 2) & ((1 << width) - 1))
    pos += width
    dictionary = ["", "", "", first]
    append = dictionary.append
    previous = first
    parts = [first]
    produced = 1
    enlarge_in = 4
    width = 3
    mask = 7
    while True:
        if pos > total_bits or width > 32:
            raise corrupt
        index = pos >> 3
        code = (from_bytes(bits[index : index + 5], "little") >> (pos & 7)) & mask
        pos += width
        if code < _LZ_END:
            size = 16 if code else 8
            index = pos >> 3
            literal = (from_bytes(bits[index : index + 5], "little") >> (pos & 7)) & (
                (1 << size) - 1
            )
            pos += size
            append(chr(literal))
            code = len(dictionary) - 1
            enlarge_in -= 1
            if enlarge_in == 0:
                enlarge_in = 1 << width
                width += 1
                mask = (1 << width) - 1
        elif code == _LZ_END:
            break
        if code < len(dictionary):
            entry = dictionary[code]
        elif code == len(dictionary):
            entry = previous + previous[0]
        else:
            raise corrupt
        parts.append(entry)
        produced += len(entry)
        if produced > limit:
            raise _too_large("decompressed lz64 body", limit)
        append(previous + entry[0])
        previous = entry
        enlarge_in -= 1
        if enlarge_in == 0:
            enlarge_in = 1 << width
            width += 1
            mask = (1 << width) - 1
    text_out = "".join(parts)
    # The units are UTF-16: pair up surrogates, replace lone ones.
    out = text_out.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode()
    if len(out) > limit:
        raise _too_large("decompressed lz64 body", limit)
    return out


def _scrub_escape(match: re.Match[bytes]) -> bytes:
    if match.group(1) is not None:
        return match.group(0) if match.group(2) is not None else _REPLACEMENT_ESCAPE
    if match.group(3) is not None or match.group(4) is not None:
        return _REPLACEMENT_ESCAPE
    return match.group(0)


def _scrub(data: bytes) -> bytes:
    return _RISKY_ESCAPE.sub(_scrub_escape, data)


def parse_json(data: bytes) -> Any:
    """JSON text as its value; :class:`PayloadError` (400 ``invalid_json``) when it is not."""
    # orjson rejects lone surrogate escapes and invalid UTF-8 itself, so only NUL escapes need
    # a look before parsing; a backslash-free body (the usual case) skips even that.
    if b"\\" in data and b"\\u0000" in data:
        data = _scrub(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _parse_json_leniently(data)


def _nan_to_none(_: str) -> None:
    return None


def _finite_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _bounded_int(text: str) -> int | float:
    """Integers beyond 64 bits become floats, as orjson (and JavaScript) would read them."""
    value = int(text)
    return value if _INT_MIN <= value <= _UINT_MAX else float(value)


def _parse_json_leniently(data: bytes) -> Any:
    """Second chance for bodies orjson refused: lone surrogates, bad UTF-8, NaN, Infinity."""
    text = _scrub(data).decode("utf-8", "replace")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(
            text, parse_constant=_nan_to_none, parse_float=_finite_float, parse_int=_bounded_int
        )
    except RecursionError:
        raise PayloadError(400, "invalid_json", "JSON body is nested too deeply") from None
    except ValueError:
        raise PayloadError(400, "invalid_json", "body is not valid JSON") from None


_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_NUMBER = b"0" * 19
"""19 digits in a row: maybe an integer beyond 64 bits, which msgspec keeps exact and
:func:`parse_json` turns into a float (as orjson and JavaScript read it)."""


def decode_as(data: bytes, kind: type[T]) -> T:
    """JSON text decoded straight into ``kind`` (a msgspec type), with the values
    ``msgspec.convert(parse_json(data), kind)`` gives: :class:`PayloadError` when it is not
    JSON, ``msgspec.ValidationError`` when it is JSON but not a ``kind``.

    msgspec decodes the usual body directly (faster than a dict, then checks); a body it
    reads otherwise than :func:`parse_json` (a NUL escape, a lone surrogate, invalid UTF-8,
    NaN, an overflowing number, an integer beyond 64 bits, deep nesting) takes the lenient
    path, as does one that does not fit ``kind`` (a float out of range becomes null there).
    """
    if (b"\\" not in data or b"\\u0000" not in data) and _LONG_NUMBER not in data.translate(
        _DIGITS
    ):
        try:
            return msgspec.json.decode(data, type=kind)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass  # msgspec.ValidationError included: the lenient value decides
    return msgspec.convert(parse_json(data), kind)
