"""Request body decoding: every encoding the SDKs use, corrupt input, size limits, unicode."""

from __future__ import annotations

import base64
import gzip
import json
import tracemalloc
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import lzstring
import msgspec
import orjson
import pytest

from flagstaff.http.payload import (
    PayloadError,
    decode_as,
    decode_body,
    decode_query_data,
    parse_json,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sdk"
EVENT = {"event": "$pageview", "properties": {"distinct_id": "u1", "token": "phc_x"}}
BATCH = {"api_key": "phc_x", "batch": [EVENT, {**EVENT, "event": "clicked"}]}
BATCH_JSON = json.dumps(BATCH).encode()

# LZ-string output of the JavaScript lz-string 1.5.0 (what posthog-js bundles) for the JSON
# beside it: astral characters arrive as UTF-16 surrogate pairs, a lone surrogate as itself.
JS_LZ64 = [
    (
        '{"api_key":"phc_x","batch":[{"event":"$pageview","properties":{"distinct_id":"u1",'
        '"title":"café 😀"}}]}',
        "N4IghgDglg+g1gUwJ4gFwggCwMYwB4gA0IARmAC7aZoDaoCAbggHblogAkEYA5o1AgDuRDACcA9hASjyAgM5pQ"
        "AEyhzZzbORhQl7AK4BGEbPIAbBO2xgAZgEuABIF4NwAB7IAL5uAum6A===",
    ),
    ('{"lone":"a\ufffdb"}', "N4IgNg9gdgpiBcICGgADYEYgL5A="),
    (
        '[{"event":"e","properties":{"token":"phc_x","distinct_id":"d"}}]',
        "NobwRApgbhB2AuYBckwBowAcBOB7TE28AlhAM7Ljy4DWcyWAFgMYD6AHumACbFkmxm8VsW4MxAXwkBdIA===",
    ),
]


def decode(
    body: bytes,
    content_type: str | None = "application/json",
    content_encoding: str | None = None,
    query: dict[str, str] | None = None,
    limit: int = 1_000_000,
) -> Any:
    return decode_body(
        body,
        content_type=content_type,
        content_encoding=content_encoding,
        query=query or {},
        limit=limit,
    )


def lz64(text: str) -> bytes:
    return lzstring.LZString().compressToBase64(text).encode()


def form(**fields: str) -> bytes:
    return "&".join(f"{key}={quote(value, safe='')}" for key, value in fields.items()).encode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# A body whose base64 holds '+' and '/', to check the '+' -> space repair of form decoding.
PLUS_JSON = json.dumps({**BATCH, "pad": "~~~>>>???"}).encode()
assert "+" in b64(PLUS_JSON) and "/" in b64(PLUS_JSON)


PLUS = json.loads(PLUS_JSON)
FORM = "application/x-www-form-urlencoded"
GZ = gzip.compress(BATCH_JSON)

# (id, body, Content-Type, Content-Encoding, query, expected)
ENCODINGS: list[tuple[str, bytes, str | None, str | None, dict[str, str], Any]] = [
    ("json", BATCH_JSON, "application/json", None, {}, BATCH),
    ("json as text/plain", BATCH_JSON, "text/plain", None, {}, BATCH),
    ("json without content type", BATCH_JSON, None, None, {}, BATCH),
    ("json with leading whitespace", b" \r\n\t" + BATCH_JSON, None, None, {}, BATCH),
    ("json with BOM", b"\xef\xbb\xbf" + BATCH_JSON, "application/json", None, {}, BATCH),
    ("json labelled as a form (curl -d)", BATCH_JSON, FORM, None, {}, BATCH),
    ("json under a gzip hint", BATCH_JSON, "application/json", "gzip", {}, BATCH),
    ("gzip by magic bytes only", GZ, "text/plain", None, {}, BATCH),
    ("gzip Content-Encoding", GZ, "application/json", "gzip", {}, BATCH),
    ("gzip query hint", GZ, None, None, {"compression": "gzip"}, BATCH),
    ("gzip-js query hint", GZ, None, None, {"compression": "gzip-js"}, BATCH),
    (
        "gzip, two members",
        gzip.compress(BATCH_JSON[:20]) + gzip.compress(BATCH_JSON[20:]),
        None,
        None,
        {},
        BATCH,
    ),
    ("deflate Content-Encoding", zlib.compress(BATCH_JSON), None, "deflate", {}, BATCH),
    (
        "lz64 query hint",
        lz64(BATCH_JSON.decode()),
        "text/plain",
        None,
        {"compression": "lz64"},
        BATCH,
    ),
    ("lz-string Content-Encoding", lz64(BATCH_JSON.decode()), None, "lz-string", {}, BATCH),
    (
        "lz64 form, compression field",
        form(data=lz64(BATCH_JSON.decode()).decode(), compression="lz64"),
        FORM,
        None,
        {},
        BATCH,
    ),
    ("base64 body", base64.b64encode(BATCH_JSON), "text/plain", None, {}, BATCH),
    ("base64 body with newlines", base64.encodebytes(BATCH_JSON), "text/plain", None, {}, BATCH),
    (
        "base64 body without padding",
        base64.b64encode(BATCH_JSON).rstrip(b"="),
        None,
        None,
        {},
        BATCH,
    ),
    ("urlsafe base64 body", base64.urlsafe_b64encode(PLUS_JSON), None, None, {}, PLUS),
    ("base64 of gzip", base64.b64encode(GZ), None, None, {}, BATCH),
    ("base64 of gzip, gzip hint", base64.b64encode(GZ), None, "gzip", {}, BATCH),
    (
        "form data=base64, ?compression=base64",
        form(data=b64(PLUS_JSON)),
        FORM,
        None,
        {"compression": "base64"},
        PLUS,
    ),
    (
        "form data=base64, raw + read as space",
        b"data=" + base64.b64encode(PLUS_JSON),
        FORM,
        None,
        {},
        PLUS,
    ),
    ("form data=base64 as text/plain", form(data=b64(PLUS_JSON)), "text/plain", None, {}, PLUS),
    ("form data=json", form(data=PLUS_JSON.decode()), FORM, None, {}, PLUS),
    ("form ver + data=base64 gzip", form(ver="1.0", data=b64(GZ)), FORM, None, {}, BATCH),
    (
        "form data=raw gzip bytes",
        b"data=" + quote(GZ, safe="").encode(),
        FORM,
        None,
        {"compression": "gzip-js"},
        BATCH,
    ),
]


@pytest.mark.parametrize(
    ("body", "content_type", "encoding", "query", "expected"),
    [case[1:] for case in ENCODINGS],
    ids=[case[0] for case in ENCODINGS],
)
def test_every_encoding_decodes_to_the_json(
    body: bytes,
    content_type: str | None,
    encoding: str | None,
    query: dict[str, str],
    expected: Any,
) -> None:
    assert decode(body, content_type, encoding, query) == expected


def test_plain_and_array_and_single_event_bodies() -> None:
    assert decode(json.dumps([EVENT]).encode()) == [EVENT]
    assert decode(json.dumps(EVENT).encode()) == EVENT


@pytest.mark.parametrize(("text", "compressed"), JS_LZ64, ids=["astral", "lone-surrogate", "array"])
def test_lz64_from_javascript_lz_string(text: str, compressed: str) -> None:
    assert decode(compressed.encode(), "text/plain", query={"compression": "lz64"}) == json.loads(
        text
    )


def test_lz64_round_trip_of_a_large_batch() -> None:
    batch = {
        "api_key": "phc_x",
        "batch": [
            {
                "event": f"e{i}",
                "properties": {"distinct_id": f"user-{i % 17}", "n": i, "s": "é" * i},
            }
            for i in range(300)
        ],
    }
    assert decode(lz64(json.dumps(batch, ensure_ascii=False)), query={"compression": "lz64"}) == (
        batch
    )


CORRUPT = [
    ("empty body", b"", None, {}, 400, "empty_body"),
    ("gzip magic then garbage", b"\x1f\x8b\x08\x00garbage-garbage", None, {}, 400, "invalid_gzip"),
    ("truncated gzip", gzip.compress(BATCH_JSON)[:-12], None, {}, 400, "invalid_gzip"),
    (
        "gzip with a bad checksum",
        gzip.compress(BATCH_JSON)[:-8] + b"\0\0\0\0" + gzip.compress(BATCH_JSON)[-4:],
        None,
        {},
        400,
        "invalid_gzip",
    ),
    ("gzip hint on binary", b"\x00\x01\x02binary", "gzip", {}, 400, "invalid_gzip"),
    ("deflate hint, corrupt", b"\x78\x9cgarbage", "deflate", {}, 400, "invalid_deflate"),
    (
        "lz64 with non-base64 characters",
        b"N4Ig!!!*",
        None,
        {"compression": "lz64"},
        400,
        "invalid_lz64",
    ),
    (
        "lz64 truncated",
        JS_LZ64[2][1][:20].encode(),
        None,
        {"compression": "lz64"},
        400,
        "invalid_lz64",
    ),
    ("lz64 bad first code", b"////", None, {"compression": "lz64"}, 400, "invalid_lz64"),
    (
        "base64 hint, bad characters",
        b"ab!d$$",
        None,
        {"compression": "base64"},
        400,
        "invalid_base64",
    ),
    ("base64 of impossible length", b"abcde", None, {}, 400, "invalid_base64"),
    ("form without data", b"ver=1.0&compression=gzip", None, {}, 400, "missing_data"),
    ("not json", b"{not json", None, {}, 400, "invalid_json"),
    ("base64 of not json", base64.b64encode(b"{nope"), None, {}, 400, "invalid_json"),
    ("json nested too deeply", b"[" * 5000 + b"]" * 5000, None, {}, 400, "invalid_json"),
]


@pytest.mark.parametrize(
    ("body", "encoding", "query", "status", "code"),
    [case[1:] for case in CORRUPT],
    ids=[case[0] for case in CORRUPT],
)
def test_corrupt_bodies_are_rejected(
    body: bytes, encoding: str | None, query: dict[str, str], status: int, code: str
) -> None:
    with pytest.raises(PayloadError) as caught:
        decode(body, "text/plain", encoding, query)
    assert (caught.value.status, caught.value.code) == (status, code)
    assert caught.value.detail


def test_raw_body_limit() -> None:
    body = json.dumps({"x": "a" * 100}).encode()
    assert decode(body, limit=len(body)) == {"x": "a" * 100}
    with pytest.raises(PayloadError) as caught:
        decode(body, limit=len(body) - 1)
    assert (caught.value.status, caught.value.code) == (413, "payload_too_large")


@pytest.mark.parametrize("compress", [gzip.compress, zlib.compress], ids=["gzip", "deflate"])
def test_decompressed_limit_is_exact(compress: Any) -> None:
    body = json.dumps({"x": "a" * 1000}).encode()
    encoding = "deflate" if compress is zlib.compress else None
    assert decode(compress(body), content_encoding=encoding, limit=len(body)) == {"x": "a" * 1000}
    with pytest.raises(PayloadError) as caught:
        decode(compress(body), content_encoding=encoding, limit=len(body) - 1)
    assert caught.value.status == 413


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """256 MiB of zeros in about 250 KB of gzip, built without holding the 256 MiB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    parts = [packer.compress(zeros) for _ in range(256)]
    parts.append(packer.flush())
    return b"".join(parts)


def test_gzip_bomb_is_refused_without_inflating_it(gzip_bomb: bytes) -> None:
    limit = 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError) as caught:
            decode(gzip_bomb, "text/plain", limit=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (caught.value.status, caught.value.code) == (413, "payload_too_large")
    assert peak < 4 * limit


def test_lz64_bomb_is_refused_without_expanding_it() -> None:
    bomb = lz64("A" * 1_000_000)
    assert len(bomb) < 4_000
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError) as caught:
            decode(bomb, query={"compression": "lz64"}, limit=10_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.status == 413
    assert peak < 200_000


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


UNICODE = [
    ("lone high surrogate", rb'{"a":"x\ud800y"}', {"a": "x\ufffdy"}),
    ("lone low surrogate", rb'{"a":"x\udc00y"}', {"a": "x\ufffdy"}),
    ("high surrogate at end", rb'{"a":"x\uDBFF"}', {"a": "x\ufffd"}),
    ("reversed pair", rb'{"a":"\udc00\ud800"}', {"a": "\ufffd\ufffd"}),
    ("valid pair kept", rb'{"a":"\ud83d\ude00"}', {"a": "😀"}),
    ("escaped backslash before u-sequence", rb'{"a":"\\ud800"}', {"a": "\\ud800"}),
    ("NUL escape", rb'{"a":"x\u0000y"}', {"a": "x\ufffdy"}),
    ("NUL in a key", rb'{"\u0000k":1}', {"\ufffdk": 1}),
    ("escaped backslash before u0000", rb'{"a":"\\u0000"}', {"a": "\\u0000"}),
    ("three backslashes then NUL", rb'{"a":"\\\u0000"}', {"a": "\\\ufffd"}),
    ("invalid UTF-8 bytes", b'{"a":"x\xff\xfey"}', {"a": "x\ufffd\ufffdy"}),
    ("CESU-8 surrogate bytes", b'{"a":"x\xed\xa0\x80y"}', {"a": "x\ufffd\ufffd\ufffdy"}),
    (
        "NaN and Infinity",
        b'{"a":NaN,"b":Infinity,"c":-Infinity,"d":1.5}',
        {"a": None, "b": None, "c": None, "d": 1.5},
    ),
    (
        "huge number with NaN",
        b'{"a":NaN,"b":123456789012345678901234567890}',
        {"a": None, "b": 1.2345678901234568e29},
    ),
    ("overflowing float", b'{"a":1e400,"b":2}', {"a": None, "b": 2}),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in UNICODE], ids=[c[0] for c in UNICODE]
)
def test_unicode_and_number_edge_cases_are_made_safe(body: bytes, expected: Any) -> None:
    result = decode(body)
    assert result == expected
    orjson.dumps(result)  # every string encodes as UTF-8, every number fits
    assert all("\x00" not in s for s in _strings(result))


class _Typed(msgspec.Struct):
    a: Any = None
    b: int | float | None = None
    c: Any = None
    d: Any = None


DIRECT = [
    ("plain", b'{"a":{"x":[1,2.5,"s",true,null]},"b":3,"z":1}'),
    (
        "64-bit bounds",
        b'{"a":[18446744073709551615,-9223372036854775808],"b":-9223372036854775808}',
    ),
    ("beyond 64 bits", b'{"a":[18446744073709551616],"b":123456789012345678901234567890}'),
    ("digits in a string", b'{"a":"1234567890123456789012345","b":1}'),
    ("duplicate keys", b'{"a":1,"a":{"k":1,"k":2}}'),
    ("deep", b'{"a":' + b"[" * 900 + b"]" * 900 + b"}"),
]


@pytest.mark.parametrize(
    "body",
    [c[1] for c in UNICODE + DIRECT],
    ids=[c[0] for c in UNICODE + DIRECT],
)
def test_decode_as_gives_the_values_of_the_lenient_parse(body: bytes) -> None:
    expected = msgspec.convert(parse_json(body), _Typed)
    assert decode_as(body, _Typed) == expected
    assert decode_as(body, dict[str, Any]) == parse_json(body)


def test_decode_as_refuses_what_is_not_json_or_not_the_type() -> None:
    with pytest.raises(PayloadError) as not_json:
        decode_as(b'{"a":', _Typed)
    assert not_json.value.code == "invalid_json"
    with pytest.raises(msgspec.ValidationError):
        decode_as(b'{"b":"x"}', _Typed)
    with pytest.raises(msgspec.ValidationError):
        decode_as(b"[1]", _Typed)
    assert decode_as(b'{"b":1e400}', _Typed).b is None  # null once the lenient parse read it


def test_lone_surrogate_inside_gzip_and_base64_form() -> None:
    body = (
        rb'{"api_key":"phc_x","batch":[{"event":"e\ud800","properties":{"distinct_id":"\u0000"}}]}'
    )
    expected = {
        "api_key": "phc_x",
        "batch": [{"event": "e\ufffd", "properties": {"distinct_id": "\ufffd"}}],
    }
    assert decode(gzip.compress(body), "text/plain") == expected
    assert decode(form(data=b64(body)), "application/x-www-form-urlencoded") == expected


QUERY_DATA = [
    ("absent", {}, None),
    ("empty", {"data": ""}, None),
    ("urlencoded json (already unquoted)", {"data": json.dumps(EVENT)}, EVENT),
    ("base64", {"data": b64(BATCH_JSON)}, BATCH),
    (
        "base64 with + turned to spaces",
        {"data": b64(PLUS_JSON).replace("+", " ")},
        json.loads(PLUS_JSON),
    ),
    (
        "urlsafe base64",
        {"data": base64.urlsafe_b64encode(PLUS_JSON).decode()},
        json.loads(PLUS_JSON),
    ),
    ("lz64", {"data": lz64(BATCH_JSON.decode()).decode(), "compression": "lz64"}, BATCH),
    ("gzip in base64", {"data": b64(gzip.compress(BATCH_JSON)), "compression": "gzip"}, BATCH),
]


@pytest.mark.parametrize(
    ("query", "expected"), [c[1:] for c in QUERY_DATA], ids=[c[0] for c in QUERY_DATA]
)
def test_legacy_query_data(query: dict[str, str], expected: Any) -> None:
    assert decode_query_data(query, 1_000_000) == expected


def test_query_data_limit_and_corruption() -> None:
    with pytest.raises(PayloadError) as caught:
        decode_query_data({"data": "a" * 101}, 100)
    assert caught.value.status == 413
    with pytest.raises(PayloadError) as caught:
        decode_query_data({"data": "{broken"}, 100)
    assert (caught.value.status, caught.value.code) == (400, "invalid_json")


def _capture_fixtures() -> list[Path]:
    return sorted(
        path
        for path in FIXTURES.glob("*.json")
        if json.loads(path.read_text()).get("events") is not None
    )


@pytest.mark.parametrize("path", _capture_fixtures(), ids=lambda path: path.stem)
def test_recorded_sdk_bodies_decode(path: Path) -> None:
    recorded = json.loads(path.read_text())
    headers = {name.lower(): value for name, value in recorded["headers"].items()}
    payload = decode_body(
        base64.b64decode(recorded["body_base64"]),
        content_type=headers.get("content-type"),
        content_encoding=headers.get("content-encoding"),
        query=dict(parse_qsl(recorded["query"])),
        limit=20 * 1024 * 1024,
    )
    items = payload["batch"] if isinstance(payload, dict) and "batch" in payload else payload
    assert [item["event"] for item in items] == recorded["events"]


# --- hostile bodies (issue 18) ------------------------------------------------------------


_decompressobj = zlib.decompressobj


class _CountingInflater:
    """Wraps a zlib decompressor and adds up the input bytes it is handed."""

    fed = 0

    def __init__(self, wbits: int) -> None:
        self._inner = _decompressobj(wbits)

    def decompress(self, data: Any, max_length: int = 0) -> bytes:
        _CountingInflater.fed += len(data)
        return self._inner.decompress(data, max_length)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_many_gzip_members_cost_linear_in_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty members: zlib is never handed the rest of the body per member, and 100,000 of them
    (2 MB) stop at the member cap."""
    import flagstaff.http.payload as payload

    monkeypatch.setattr(payload.zlib, "decompressobj", _CountingInflater)
    _CountingInflater.fed = 0
    empty = gzip.compress(b"", mtime=0)
    body = empty * 100_000 + gzip.compress(BATCH_JSON, mtime=0)
    with pytest.raises(PayloadError) as info:
        decode(body, limit=4 << 20)
    assert info.value.code == "invalid_gzip"
    assert _CountingInflater.fed <= 4 * 1000 * len(empty)
    _CountingInflater.fed = 0
    body = empty * 998 + gzip.compress(BATCH_JSON, mtime=0)
    assert decode(body) == BATCH
    assert _CountingInflater.fed <= 4 * len(body)


def test_many_members_with_content_join_once() -> None:
    parts = [BATCH_JSON[i : i + 7] for i in range(0, len(BATCH_JSON), 7)]
    assert decode(b"".join(gzip.compress(p, mtime=0) for p in parts)) == BATCH


@pytest.mark.parametrize("body", [b"abcde", b"hello world", b"QUJD="])
def test_json_labelled_text_is_reported_as_invalid_json(body: bytes) -> None:
    with pytest.raises(PayloadError) as info:
        decode_body(
            body, content_type="application/json", content_encoding=None, query={}, limit=1 << 20
        )
    assert info.value.code == "invalid_json"


@pytest.mark.parametrize(
    "body",
    [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage!", b'{"a": 1,,}', b"%%%%"],
)
def test_errors_name_the_problem_without_internals(body: bytes) -> None:
    with pytest.raises(PayloadError) as info:
        decode_body(body, content_type=None, content_encoding=None, query={}, limit=1 << 20)
    detail = info.value.detail
    for internal in ("Error -3", "while decompressing", "line 1", "column", "char ", "Incorrect"):
        assert internal not in detail, detail
