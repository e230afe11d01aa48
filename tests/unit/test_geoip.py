"""GeoIP look-ups against small MaxMind-format databases written here, and the installed one."""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import maxminddb
import pytest

from flagstaff.server import geoip
from flagstaff.server.geoip import (
    CONTINENT_NAMES,
    PERSON_PROPERTIES,
    GeoIP,
    default_database_path,
    open_geoip,
)


def lookup_event(geo: GeoIP, ip: str) -> geoip.EventProperties:
    """Everything PostHog's event GeoIP step sets for ``ip`` (the seven plus subdivisions,
    latitude, longitude, accuracy radius, city confidence) that is known: what the reader
    resolves besides the seven person properties (the service reads only those)."""
    if type(ip) is not str or len(ip) > geoip._MAX_IP_LENGTH:
        return {}
    return geo._cached(ip)[1]


# --- a minimal MaxMind DB writer (format spec 2.0), enough for the reader's C extension ---------


class U16(int):
    pass


class U32(int):
    pass


class U64(int):
    pass


class F32(float):
    pass


def _control(type_: int, size: int) -> bytes:
    if size < 29:
        head, extra = size, b""
    elif size < 285:
        head, extra = 29, bytes([size - 29])
    elif size < 65821:
        head, extra = 30, (size - 285).to_bytes(2, "big")
    else:
        head, extra = 31, (size - 65821).to_bytes(3, "big")
    if type_ <= 7:
        return bytes([type_ << 5 | head]) + extra
    return bytes([head, type_ - 7]) + extra


def _uint(type_: int, value: int) -> bytes:
    payload = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return _control(type_, len(payload)) + payload


def _encode(value: object) -> bytes:
    if isinstance(value, bool):
        return _control(14, int(value))
    if isinstance(value, str):
        raw = value.encode()
        return _control(2, len(raw)) + raw
    if isinstance(value, F32):
        return _control(15, 4) + struct.pack(">f", value)
    if isinstance(value, float):
        return _control(3, 8) + struct.pack(">d", value)
    if isinstance(value, U16):
        return _uint(5, value)
    if isinstance(value, U64):
        return _uint(9, value)
    if isinstance(value, int):
        return _uint(6, value)
    if isinstance(value, dict):
        items = b"".join(_encode(k) + _encode(v) for k, v in value.items())
        return _control(7, len(value)) + items
    if isinstance(value, list):
        return _control(11, len(value)) + b"".join(_encode(v) for v in value)
    raise TypeError(value)


def write_mmdb(path: Path, networks: dict[str, dict[str, object]], ip_version: int = 6) -> Path:
    """A database mapping each CIDR to its record (IPv4 ones under ::/96 in an IPv6 tree)."""
    depth = 128 if ip_version == 6 else 32
    root: list[object] = [None, None]
    data = bytearray()
    offsets: dict[bytes, int] = {}
    for cidr, record in networks.items():
        network = ipaddress.ip_network(cidr)
        prefix = network.prefixlen + (96 if ip_version == 6 and network.version == 4 else 0)
        bits = int(network.network_address)
        encoded = _encode(record)
        if encoded not in offsets:
            offsets[encoded] = len(data)
            data += encoded
        leaf = ("data", offsets[encoded])
        node = root
        for i in range(prefix):
            bit = (bits >> (depth - 1 - i)) & 1
            if i == prefix - 1:
                node[bit] = leaf
                break
            child = node[bit]
            if not isinstance(child, list):
                child = [child, child]  # splits a wider network's leaf, or opens a path
                node[bit] = child
            node = child
    nodes: list[list[object]] = []
    queue = [root]
    while queue:
        node = queue.pop(0)
        nodes.append(node)
        queue += [child for child in node if isinstance(child, list)]
    index = {id(node): number for number, node in enumerate(nodes)}
    count = len(nodes)

    def record_value(child: object) -> int:
        if child is None:
            return count
        if isinstance(child, list):
            return index[id(child)]
        assert isinstance(child, tuple)
        return count + 16 + child[1]

    tree = b"".join(
        record_value(node[0]).to_bytes(3, "big") + record_value(node[1]).to_bytes(3, "big")
        for node in nodes
    )
    metadata = {
        "binary_format_major_version": U16(2),
        "binary_format_minor_version": U16(0),
        "build_epoch": U64(1_700_000_000),
        "database_type": "Flagstaff-Test-City",
        "description": {"en": "test"},
        "ip_version": U16(ip_version),
        "languages": ["en"],
        "node_count": U32(count),
        "record_size": U16(24),
    }
    path.write_bytes(tree + bytes(16) + data + b"\xab\xcd\xefMaxMind.com" + _encode(metadata))
    return path


# --- records as the two layouts hold them ----------------------------------------------------

LONDON = {
    "city": {"geoname_id": 2643743, "names": {"en": "London", "de": "London"}},
    "continent": {"code": "EU", "geoname_id": 6255148, "names": {"en": "Europe"}},
    "country": {"geoname_id": 2635167, "iso_code": "GB", "names": {"en": "United Kingdom"}},
    "location": {
        "accuracy_radius": 20,
        "latitude": 51.5142,
        "longitude": -0.0931,
        "time_zone": "Europe/London",
    },
    "postal": {"code": "EC2V"},
    "registered_country": {"iso_code": "GB", "names": {"en": "United Kingdom"}},
    "subdivisions": [
        {"iso_code": "ENG", "names": {"en": "England"}},
        {"iso_code": "CMD", "names": {"en": "City of London"}},
    ],
}
BERLIN_V6 = {
    "city": {"names": {"en": "Berlin"}, "confidence": 60},
    "continent": {"code": "EU", "names": {"en": "Europe"}},
    "country": {"iso_code": "DE", "names": {"en": "Germany"}},
    "location": {"latitude": 52.5, "longitude": 13.4, "time_zone": "Europe/Berlin"},
    "postal": {"code": "10115"},
}
COUNTRY_ONLY = {
    "continent": {"code": "NA", "names": {"en": "North America"}},
    "country": {"iso_code": "US", "names": {"en": "United States"}},
}
PRIVATE = {"country": {"iso_code": "ZZ", "names": {"en": "Nowhere"}}}

LONDON_SEVEN = {
    "$geoip_city_name": "London",
    "$geoip_country_name": "United Kingdom",
    "$geoip_country_code": "GB",
    "$geoip_continent_name": "Europe",
    "$geoip_continent_code": "EU",
    "$geoip_postal_code": "EC2V",
    "$geoip_time_zone": "Europe/London",
}


@pytest.fixture
def maxmind_db(tmp_path: Path) -> Path:
    return write_mmdb(
        tmp_path / "city.mmdb",
        {
            "81.2.69.0/24": LONDON,
            "81.2.69.192/28": COUNTRY_ONLY,  # a narrower network inside London's
            "2a02:8100::/32": BERLIN_V6,
            "10.0.0.0/8": PRIVATE,  # present in the file, still never reported
        },
    )


@pytest.fixture
def flat_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "flat"
    folder.mkdir()
    flat_ny = {
        "city": "New York",
        "country_code": "US",
        "latitude": F32(40.7128),
        "longitude": F32(-74.006),
        "postcode": "10001",
        "state1": "New York",
        "state2": "",
        "timezone": "America/New_York",
    }
    write_mmdb(folder / "city-ipv4.mmdb", {"8.8.0.0/16": flat_ny}, ip_version=4)
    write_mmdb(
        folder / "city-ipv6.mmdb",
        {
            "2001:4860::/32": {"city": "", "country_code": "JP", "state1": "", "timezone": ""},
            "2400:cb00::/32": {"country_code": "QQ", "city": "Atlantis"},
        },
        ip_version=6,
    )
    return folder


# --- MaxMind's layout ------------------------------------------------------------------------


def test_seven_person_properties_from_a_city_record(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        assert geo.lookup("81.2.69.160") == LONDON_SEVEN
        assert tuple(geo.lookup("81.2.69.160")) == PERSON_PROPERTIES


def test_event_properties_add_subdivisions_and_location(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        event = lookup_event(geo, "81.2.69.1")
    assert event == {
        **LONDON_SEVEN,
        "$geoip_latitude": 51.5142,
        "$geoip_longitude": -0.0931,
        "$geoip_accuracy_radius": 20,
        "$geoip_subdivision_1_code": "ENG",
        "$geoip_subdivision_1_name": "England",
        "$geoip_subdivision_2_code": "CMD",
        "$geoip_subdivision_2_name": "City of London",
    }


def test_ipv6_and_ipv4_mapped_addresses(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        berlin = lookup_event(geo, "2a02:8100:1234::1")
        assert berlin["$geoip_city_name"] == "Berlin"
        assert berlin["$geoip_city_confidence"] == 60
        assert berlin["$geoip_country_code"] == "DE"
        assert geo.lookup("2A02:8100::ABCD")["$geoip_postal_code"] == "10115"
        assert geo.lookup("::ffff:81.2.69.160") == LONDON_SEVEN
        assert geo.lookup("2a03::1") == {}


def test_a_narrower_network_wins_and_absent_fields_are_left_out(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        assert geo.lookup("81.2.69.200") == {
            "$geoip_country_name": "United States",
            "$geoip_country_code": "US",
            "$geoip_continent_name": "North America",
            "$geoip_continent_code": "NA",
        }
        assert geo.lookup("81.2.69.191")["$geoip_city_name"] == "London"


@pytest.mark.parametrize(
    "ip",
    [
        "10.1.2.3",
        "127.0.0.1",
        "192.168.1.1",
        "172.16.5.4",
        "100.64.0.1",
        "169.254.1.1",
        "0.0.0.0",
        "224.0.0.251",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fd12:3456::1",
        "ff02::1",
        "2001:db8::1",
        "::ffff:10.0.0.1",
    ],
)
def test_private_and_special_addresses_give_nothing(maxmind_db: Path, ip: str) -> None:
    with GeoIP(maxmind_db) as geo:
        assert geo.lookup(ip) == {}
        assert lookup_event(geo, ip) == {}


@pytest.mark.parametrize(
    "ip",
    [
        "",
        "   ",
        "garbage",
        "81.2.69",
        "81.2.69.160.1",
        "81.2.69.256",
        "081.2.69.160",
        "81.2.69.160/24",
        "81.2.69.160:443",
        "[2a02:8100::1]",
        "2a02:8100::1::2",
        "fe80::1%eth0",
        "81.2.69.160\x00",
        "8" * 10_000,
        None,
        81_026_944,
        b"81.2.69.160",
        ["81.2.69.160"],
    ],
)
def test_invalid_input_gives_nothing_and_never_raises(maxmind_db: Path, ip: object) -> None:
    with GeoIP(maxmind_db) as geo:
        assert geo.lookup(ip) == {}  # type: ignore[arg-type]
        assert lookup_event(geo, ip) == {}  # type: ignore[arg-type]


def test_surrounding_whitespace_is_ignored(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        assert geo.lookup(" 81.2.69.160\t") == LONDON_SEVEN


def test_public_address_missing_from_the_database(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        assert geo.lookup("8.8.8.8") == {}


# --- the flat ip-location-db layout, IPv4 and IPv6 in two files -----------------------------


def test_flat_layout_folder(flat_dir: Path) -> None:
    with GeoIP(flat_dir) as geo:
        assert geo.lookup("8.8.4.4") == {
            "$geoip_city_name": "New York",
            "$geoip_country_name": "United States",
            "$geoip_country_code": "US",
            "$geoip_continent_name": "North America",
            "$geoip_continent_code": "NA",
            "$geoip_postal_code": "10001",
            "$geoip_time_zone": "America/New_York",
        }
        event = lookup_event(geo, "::ffff:8.8.8.8")
        # 32-bit floats come back at the four decimals they hold
        assert event["$geoip_latitude"] == 40.7128
        assert event["$geoip_longitude"] == -74.006
        assert event["$geoip_subdivision_1_name"] == "New York"
        assert "$geoip_subdivision_2_name" not in event
        assert geo.lookup("2001:4860:4860::8888") == {
            "$geoip_country_name": "Japan",
            "$geoip_country_code": "JP",
            "$geoip_continent_name": "Asia",
            "$geoip_continent_code": "AS",
        }
        # a code missing from the country table keeps what the record itself says
        assert geo.lookup("2400:cb00::1") == {
            "$geoip_city_name": "Atlantis",
            "$geoip_country_code": "QQ",
        }
        assert geo.lookup("9.9.9.9") == {}


def test_ipv4_only_database_answers_nothing_for_ipv6(tmp_path: Path) -> None:
    path = write_mmdb(tmp_path / "v4.mmdb", {"8.8.0.0/16": {"country_code": "US"}}, 4)
    with GeoIP(path) as geo:
        assert geo.lookup("8.8.8.8")["$geoip_country_code"] == "US"
        assert geo.lookup("2a02:8100::1") == {}


def test_country_table_covers_every_code_with_a_known_continent() -> None:
    table = geoip._countries()
    assert len(table) >= 249
    assert table["US"] == ("United States", "NA")
    assert table["GB"] == ("United Kingdom", "EU")
    for code, (name, continent) in table.items():
        assert len(code) == 2 and code.isupper() and name
        assert continent in CONTINENT_NAMES


# --- caching, opening, closing --------------------------------------------------------------


def test_repeated_lookups_are_cache_hits(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        first = geo.lookup("81.2.69.160")
        before = geo.cache_info()
        assert geo.lookup("81.2.69.160") is first
        assert lookup_event(geo, "81.2.69.160")["$geoip_city_name"] == "London"
        after = geo.cache_info()
        assert (after.hits - before.hits, after.misses - before.misses) == (2, 0)
        geo.lookup("garbage")
        geo.lookup("garbage")
        assert geo.cache_info().hits == after.hits + 1


def test_cache_is_bounded(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db, cache_size=2) as geo:
        for ip in ("81.2.69.1", "81.2.69.2", "81.2.69.3"):
            geo.lookup(ip)
        assert geo.cache_info().currsize == 2
        assert geo.lookup("81.2.69.1") == LONDON_SEVEN


def test_closed_database_answers_nothing(maxmind_db: Path) -> None:
    geo = GeoIP(maxmind_db)
    assert geo.lookup("81.2.69.160")
    geo.close()
    assert geo.lookup("81.2.69.160") == {}
    geo.close()


def test_description_names_type_and_build_date(maxmind_db: Path) -> None:
    with GeoIP(maxmind_db) as geo:
        assert "Flagstaff-Test-City IPv6 built 2023-11-14" in geo.description


def test_open_geoip_missing_path_gives_none(tmp_path: Path) -> None:
    assert open_geoip(tmp_path / "nope.mmdb") is None


def test_open_geoip_explicit_path(maxmind_db: Path) -> None:
    geo = open_geoip(str(maxmind_db))
    assert geo is not None
    with geo:
        assert geo.lookup("81.2.69.160") == LONDON_SEVEN


def test_damaged_file_raises_on_open(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mmdb"
    bad.write_bytes(b"not a database" * 100)
    with pytest.raises(maxminddb.InvalidDatabaseError):
        GeoIP(bad)


def test_folder_without_databases_or_with_two_of_a_kind_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        GeoIP(tmp_path)
    write_mmdb(tmp_path / "a.mmdb", {"8.8.0.0/16": {"country_code": "US"}}, 4)
    write_mmdb(tmp_path / "b.mmdb", {"9.9.0.0/16": {"country_code": "CH"}}, 4)
    with pytest.raises(ValueError, match="second IPv4"):
        GeoIP(tmp_path)


def test_default_path_prefers_the_package_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flat_dir: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    flat_dir.rename(data / "geoip")
    monkeypatch.setattr(geoip, "_DATA_DIR", data)
    assert default_database_path() == str(data / "geoip")
    geo = open_geoip(None)
    assert geo is not None
    with geo:
        assert geo.lookup("8.8.8.8")["$geoip_city_name"] == "New York"


# --- the database that scripts/fetch-geoip.sh installs --------------------------------------


def test_installed_database_locates_well_known_addresses() -> None:
    path = default_database_path()
    assert path is not None, "no GeoIP database installed: run `bash scripts/fetch-geoip.sh`"
    with GeoIP(path) as geo:
        google = geo.lookup("8.8.8.8")
        assert google["$geoip_country_code"] == "US"
        assert google["$geoip_country_name"] == "United States"
        assert google["$geoip_continent_code"] == "NA"
        assert google["$geoip_continent_name"] == "North America"
        assert geo.lookup("2001:4860:4860::8888").get("$geoip_country_code", "").isalpha()
        assert geo.lookup("10.0.0.1") == {}
