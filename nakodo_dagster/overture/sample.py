"""Sample Overture places releases, made here so that tests, benchmarks and the default run need no internet.

A release is written in Overture's layout, ``<root>/<release>/theme=places/type=place/part-*.zstd.parquet``,
with Overture's places columns and GeoParquet 1.1 metadata. Two schema flavours:

- ``current`` (the 2026-09 releases on): ``basic_category`` and ``taxonomy`` (primary, hierarchy,
  alternates) and ``operating_status``; no ``categories``.
- ``previous`` (the releases before 2025-09): ``categories`` (primary, alternate) and no
  ``operating_status``, no ``basic_category``, no ``taxonomy``.

The flavour does not depend on the release name: any name can carry either, so both can be tested side by side.
``bbox`` is a struct of doubles (Overture ships floats; doubles keep a point's box exactly on the point).

Places cluster around ``CITIES`` and carry categories from ``TAXONOMY``, a subset of Overture's taxonomy
(docs.overturemaps.org, 2026-03 categories and hierarchies). Rows are sorted along a Hilbert curve and the
files split that order, as Overture's files are spatially sorted, so row-group statistics on ``bbox`` prune.
``FIXED_PLACES`` are always in the release: the edge cases every reader has to get right.
These tables, and the words and streets that made-up places are named and addressed with, ship as package data
in ``nakodo_dagster/data/sample_release.toml`` and are read once at import; the code that makes rows from them is here.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import tomllib
from dataclasses import dataclass, fields
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import check_release_name
from nakodo_dagster.placement import KM_PER_DEGREE, MIN_COS_LAT

DEFAULT_RELEASE = "2026-11-18.0"
DEFAULT_ROWS = 100_000
# Overture's places release: 16 files of about 256 row groups each.
DEFAULT_FILES = 16
ROW_GROUPS_PER_FILE = 256
SCHEMAS = ("current", "previous")


@dataclass(frozen=True)
class City:
    """A place where sample businesses cluster: a centre, its country and how far the places spread."""

    name: str
    lat: float
    lng: float
    country: str
    weight: float
    spread_km: float


@dataclass(frozen=True)
class Category:
    """One Overture category: its primary name, its hierarchy (general to specific) and its basic category."""

    primary: str
    hierarchy: tuple[str, ...]
    basic: str
    noun: str
    weight: float


@dataclass(frozen=True)
class FixedPlace:
    """A place written into every sample release, at an exact spot, to pin down one edge case."""

    name: str
    lat: float
    lng: float
    category: str
    # Address countries in order; () is a place with no address.
    countries: tuple[str, ...]
    locality: str
    confidence: float = 0.95
    status: str = "open"


_TABLES_FILE = "data/sample_release.toml"
_TABLES = tomllib.loads(files("nakodo_dagster").joinpath(_TABLES_FILE).read_text(encoding="utf-8"))

CITIES: tuple[City, ...] = tuple(City(**row) for row in _TABLES["cities"])

# Each category's parent in Overture's taxonomy, up to the top level.
_PARENTS: dict[str, str] = _TABLES["parents"]


def _hierarchy(primary: str) -> tuple[str, ...]:
    path = [primary]
    while path[-1] in _PARENTS:
        path.append(_PARENTS[path[-1]])
    return tuple(reversed(path))


TAXONOMY: tuple[Category, ...] = tuple(
    Category(row["primary"], _hierarchy(row["primary"]), row["basic"], row["noun"], float(row["weight"]))
    for row in _TABLES["categories"]
)
"""The sample's categories: in the previous schema the same names are ``categories.primary``, as they were."""

FIXED_PLACES: tuple[FixedPlace, ...] = tuple(
    FixedPlace(**{**row, "countries": tuple(row["countries"])}) for row in _TABLES["fixed_places"]
)

STATUSES = ("open", "temporarily_closed", "permanently_closed")
_STATUS_SHARES = (0.93, 0.02, 0.05)

_ADJECTIVES: tuple[str, ...] = tuple(_TABLES["adjectives"])
_STREETS: dict[str, tuple[str, ...]] = {country: tuple(names) for country, names in _TABLES["streets"].items()}
_DEFAULT_STREETS: tuple[str, ...] = tuple(_TABLES["default_streets"])
_DIAL_CODES: dict[str, str] = _TABLES["dial_codes"]

_DATASETS = ("meta", "Microsoft", "Foursquare", "AllThePlaces")

# Basel's tripoint with France and Germany, roughly: the Rhine runs north from it, France lies to the west.
_TRIPOINT_LAT = 47.59
_RHINE_LNG = 7.59
_FRENCH_BORDER_LNG = 7.555
_BORDER_CITIES = ("Basel", "Mulhouse", "Freiburg im Breisgau")
_BORDER_LOCALITIES = {"FR": "Saint-Louis", "DE": "Weil am Rhein", "CH": "Basel"}

_NAMES_TYPE = pa.struct(
    [
        ("primary", pa.string()),
        ("common", pa.map_(pa.string(), pa.string())),
        (
            "rules",
            pa.list_(
                pa.struct(
                    [
                        ("variant", pa.string()),
                        ("language", pa.string()),
                        ("value", pa.string()),
                        ("between", pa.list_(pa.float64())),
                        ("side", pa.string()),
                    ]
                )
            ),
        ),
    ]
)
_SOURCE_TYPE = pa.struct(
    [
        ("property", pa.string()),
        ("dataset", pa.string()),
        ("license", pa.string()),
        ("record_id", pa.string()),
        ("update_time", pa.string()),
        ("confidence", pa.float64()),
        ("between", pa.list_(pa.float64())),
    ]
)
_ADDRESS_TYPE = pa.struct(
    [
        ("freeform", pa.string()),
        ("locality", pa.string()),
        ("postcode", pa.string()),
        ("region", pa.string()),
        ("country", pa.string()),
    ]
)
_BBOX_TYPE = pa.struct([("xmin", pa.float64()), ("xmax", pa.float64()), ("ymin", pa.float64()), ("ymax", pa.float64())])
_TAXONOMY_TYPE = pa.struct(
    [("primary", pa.string()), ("hierarchy", pa.list_(pa.string())), ("alternates", pa.list_(pa.string()))]
)
_CATEGORIES_TYPE = pa.struct([("primary", pa.string()), ("alternate", pa.list_(pa.string()))])
_STRINGS = pa.list_(pa.string())


def places_schema(schema: str = "current") -> pa.Schema:
    """The Arrow schema of a places file in the given flavour, ``current`` or ``previous``."""
    _check_schema(schema)
    fields = [
        ("id", pa.string()),
        ("geometry", pa.binary()),
        ("bbox", _BBOX_TYPE),
        ("version", pa.int32()),
        ("sources", pa.list_(_SOURCE_TYPE)),
        ("names", _NAMES_TYPE),
    ]
    if schema == "current":
        fields += [("basic_category", pa.string()), ("taxonomy", _TAXONOMY_TYPE)]
    else:
        fields += [("categories", _CATEGORIES_TYPE)]
    fields += [
        ("confidence", pa.float64()),
        ("websites", _STRINGS),
        ("socials", _STRINGS),
        ("emails", _STRINGS),
        ("phones", _STRINGS),
        ("brand", pa.struct([("wikidata", pa.string()), ("names", _NAMES_TYPE)])),
        ("addresses", pa.list_(_ADDRESS_TYPE)),
    ]
    if schema == "current":
        fields.append(("operating_status", pa.string()))
    return pa.schema(fields)


def border_country(lat: np.ndarray, lng: np.ndarray) -> np.ndarray:
    """Which of FR, DE, CH a point around Basel lies in, by a rough rule of the Rhine and the French border."""
    north = lat >= _TRIPOINT_LAT
    french = (north & (lng < _RHINE_LNG)) | (~north & (lat >= 47.5) & (lng < _FRENCH_BORDER_LNG))
    german = north & (lng >= _RHINE_LNG)
    return np.where(french, "FR", np.where(german, "DE", "CH"))


@dataclass(frozen=True)
class ReleaseDrift:
    """How a next release differs from the one the same rows and seed write without it: a month's churn (a share
    of the places gone, as many new ones), and what a bad release does to whole categories: ``drop`` keeps a
    tenth of each one's places, ``inflate`` adds three new places for each one it had."""

    drop: tuple[str, ...] = ()
    inflate: tuple[str, ...] = ()
    churn: float = 0.03

    def __post_init__(self) -> None:
        known = {c.primary for c in TAXONOMY}
        unknown = sorted((set(self.drop) | set(self.inflate)) - known)
        if unknown:
            raise InvalidInput(f"categories {unknown} are not in the sample's taxonomy; e.g. cafe, pub, bakery")
        if set(self.drop) & set(self.inflate):
            raise InvalidInput("a category cannot be both dropped and inflated")
        if isinstance(self.churn, bool) or not isinstance(self.churn, int | float) or not 0 <= self.churn < 1:
            raise InvalidInput(f"churn {self.churn!r} is not allowed: use a share from 0 to under 1")


# What ReleaseDrift does to a dropped and to an inflated category.
DROPPED_KEEPS = 0.1
INFLATED_GAINS = 3


def write_sample_release(
    root: str | Path,
    release: str = DEFAULT_RELEASE,
    rows: int = DEFAULT_ROWS,
    files: int = DEFAULT_FILES,
    row_group_rows: int | None = None,
    schema: str = "current",
    seed: int = 0,
    progress: bool = True,
    drift: ReleaseDrift | None = None,
) -> Path:
    """Write a sample places release under ``root`` in Overture's layout and return the release's folder.

    ``row_group_rows`` defaults to what gives each file about 256 row groups, as in Overture's releases.
    The same arguments always write the same rows. With ``drift``, the release is the next one after what the
    same arguments write without it: the same places by id, changed as ``drift`` says (the fixed places stay).
    """
    check_release_name(release)
    _check_schema(schema)
    for name, value, low in (("rows", rows, len(FIXED_PLACES)), ("files", files, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidInput(f"{name} {value!r} is not allowed: use a whole number of at least {low}")
    if files > rows:
        raise InvalidInput(f"files {files} is more than rows {rows}: every file needs at least one place")
    if row_group_rows is None:
        row_group_rows = max(1, math.ceil(rows / files / ROW_GROUPS_PER_FILE))
    if isinstance(row_group_rows, bool) or not isinstance(row_group_rows, int) or row_group_rows < 1:
        raise InvalidInput(f"row_group_rows {row_group_rows!r} is not allowed: use a whole number of at least 1")
    root = Path(root)
    target = root / release
    if target.exists():
        raise InvalidInput(f"{target} already exists: choose another release name or remove that folder")

    places = _Places.generate(rows, np.random.default_rng(seed))
    if drift is not None:
        places = places.drifted(drift, np.random.default_rng([seed, 2]))
        rows = len(places.lat)
    order = np.argsort(_hilbert(places.lng, places.lat), kind="stable")
    file_ids = random_uuid_words(np.random.default_rng([seed, 1]), files)
    arrow_schema = places_schema(schema)
    root.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed into place: a crash never leaves a half release that discovery would pick up.
    staging = Path(tempfile.mkdtemp(prefix=f".{release}.", dir=root))
    try:
        folder = staging / "theme=places" / "type=place"
        folder.mkdir(parents=True)
        with tqdm(total=rows, unit="places", desc=f"sample {release}", disable=None if progress else True) as bar:
            for number, chunk in enumerate(np.array_split(order, files)):
                table = places.table(chunk, schema, arrow_schema)
                name = f"part-{number:05d}-{_uuid(*file_ids[number])}-c000.zstd.parquet"
                pq.write_table(
                    table.replace_schema_metadata({b"geo": _geo_metadata(table)}),
                    folder / name,
                    row_group_size=row_group_rows,
                    compression="zstd",
                )
                bar.update(len(chunk))
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _check_schema(schema: str) -> None:
    if schema not in SCHEMAS:
        raise InvalidInput(f"schema {schema!r} is not allowed: use 'current' (taxonomy) or 'previous' (categories)")


@dataclass
class _Places:
    """Every sample place as plain numbers; strings are made per file from these, so memory stays small."""

    lat: np.ndarray
    lng: np.ndarray
    category: np.ndarray
    alternate: np.ndarray
    confidence: np.ndarray
    status: np.ndarray
    countries: np.ndarray
    addresses: np.ndarray
    locality: np.ndarray
    adjective: np.ndarray
    house: np.ndarray
    street: np.ndarray
    postcode: np.ndarray
    phone: np.ndarray
    has_phone: np.ndarray
    has_website: np.ndarray
    has_email: np.ndarray
    has_social: np.ndarray
    version: np.ndarray
    dataset: np.ndarray
    record: np.ndarray
    id_words: np.ndarray
    fixed_name: np.ndarray

    @classmethod
    def generate(cls, rows: int, rng: np.random.Generator) -> _Places:
        n = rows - len(FIXED_PLACES)
        city_weights = np.array([c.weight for c in CITIES])
        city = rng.choice(len(CITIES), size=n, p=city_weights / city_weights.sum())
        centre_lat = np.array([c.lat for c in CITIES])[city]
        spread = np.array([c.spread_km for c in CITIES])[city] / KM_PER_DEGREE
        lat = np.clip(centre_lat + rng.normal(0.0, 1.0, n) * spread, -90.0, 90.0)
        cos_lat = np.maximum(np.cos(np.radians(centre_lat)), MIN_COS_LAT)
        lng = np.array([c.lng for c in CITIES])[city] + rng.normal(0.0, 1.0, n) * spread / cos_lat
        lng = (lng + 180.0) % 360.0 - 180.0
        # Overture's coordinates carry 7 decimals, about a centimetre.
        lat, lng = np.round(lat, 7), np.round(lng, 7)

        country = np.array([c.country for c in CITIES], dtype=object)[city]
        locality = np.array([c.name for c in CITIES], dtype=object)[city]
        border = np.isin(city, [i for i, c in enumerate(CITIES) if c.name in _BORDER_CITIES])
        border_countries = border_country(lat[border], lng[border])
        country[border] = border_countries
        basel = border & (locality == "Basel")
        locality[basel] = [_BORDER_LOCALITIES[c] for c in country[basel]]

        category_weights = np.array([c.weight for c in TAXONOMY])
        category = rng.choice(len(TAXONOMY), size=n, p=category_weights / category_weights.sum())
        alternate = np.where(rng.random(n) < 0.1, rng.integers(0, len(TAXONOMY), n), -1)
        # Overture: an alternate is never in the primary's hierarchy, nor the primary itself.
        related = np.array([[b.primary in a.hierarchy or a.primary in b.hierarchy for b in TAXONOMY] for a in TAXONOMY])
        alternate[(alternate >= 0) & related[category, np.maximum(alternate, 0)]] = -1

        confidence = np.round(rng.beta(5.0, 2.0, n), 4)
        confidence[rng.random(n) < 0.01] = np.nan
        status = rng.choice(len(STATUSES), size=n, p=_STATUS_SHARES)
        # Overture sets a closed place's confidence to 0; half keep theirs here, so each filter is tested alone.
        closed = (status == 2) & (rng.random(n) < 0.5)
        confidence[closed] = 0.0
        addresses = rng.choice(3, size=n, p=(0.08, 0.89, 0.03))
        countries = np.stack([country, country], axis=1)

        fixed = FIXED_PLACES
        by_primary = {c.primary: i for i, c in enumerate(TAXONOMY)}
        fixed_countries = np.array([(*f.countries, None, None)[:2] for f in fixed], dtype=object)
        return cls(
            lat=np.concatenate([[f.lat for f in fixed], lat]),
            lng=np.concatenate([[f.lng for f in fixed], lng]),
            category=np.concatenate([[by_primary[f.category] for f in fixed], category]),
            alternate=np.concatenate([np.full(len(fixed), -1), alternate]),
            confidence=np.concatenate([[f.confidence for f in fixed], confidence]),
            status=np.concatenate([[STATUSES.index(f.status) for f in fixed], status]),
            countries=np.concatenate([fixed_countries, countries]),
            addresses=np.concatenate([[len(f.countries) for f in fixed], addresses]),
            locality=np.concatenate([np.array([f.locality for f in fixed], dtype=object), locality]),
            adjective=rng.integers(0, len(_ADJECTIVES), rows),
            house=rng.integers(1, 300, rows),
            street=rng.integers(0, 1000, rows),
            postcode=rng.integers(1000, 99999, rows),
            phone=rng.integers(10**8, 10**9, rows),
            has_phone=rng.random(rows) < 0.8,
            has_website=rng.random(rows) < 0.6,
            has_email=rng.random(rows) < 0.1,
            has_social=rng.random(rows) < 0.5,
            version=rng.integers(0, 6, rows, dtype=np.int32),
            dataset=rng.choice(len(_DATASETS), size=rows, p=(0.8, 0.1, 0.07, 0.03)),
            record=rng.integers(10**14, 10**15, rows),
            id_words=random_uuid_words(rng, rows),
            fixed_name=np.concatenate(
                [np.array([f.name for f in fixed], dtype=object), np.full(n, None, dtype=object)]
            ),
        )

    def _take(self, index: np.ndarray) -> _Places:
        return _Places(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def _concat(parts: list[_Places]) -> _Places:
        return _Places(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(_Places)})

    def _new(self, count: int, rng: np.random.Generator) -> _Places:
        """``count`` new places (new ids), spread as the sample's are, without the fixed ones."""
        return _Places.generate(count + len(FIXED_PLACES), rng)._take(
            np.arange(len(FIXED_PLACES), count + len(FIXED_PLACES))
        )

    def drifted(self, drift: ReleaseDrift, rng: np.random.Generator) -> _Places:
        """These places a release later, as ``drift`` says."""
        n, fixed = len(self.lat), len(FIXED_PLACES)
        primaries = np.array([c.primary for c in TAXONOMY])
        keep = rng.random(n) >= drift.churn
        dropped = np.isin(primaries[self.category], drift.drop)
        keep &= ~dropped | (rng.random(n) < DROPPED_KEEPS)
        keep[:fixed] = True
        parts = [self._take(np.flatnonzero(keep)), self._new(round(drift.churn * n), rng)]
        for category in drift.inflate:
            index = int(np.flatnonzero(primaries == category)[0])
            had = int(np.sum(keep[fixed:] & (self.category[fixed:] == index)))
            extra = self._new(had * INFLATED_GAINS, rng)
            extra.category[:] = index
            extra.alternate[:] = -1
            parts.append(extra)
        return _Places._concat(parts)

    def table(self, rows: np.ndarray, schema: str, arrow_schema: pa.Schema) -> pa.Table:
        """The places at the given indices as an Arrow table in the given flavour."""
        n = len(rows)
        lat, lng = self.lat[rows], self.lng[rows]
        category = self.category[rows]
        noun = pc.take(pa.array([c.noun for c in TAXONOMY]), category)
        made_up = pc.binary_join_element_wise(pc.take(pa.array(_ADJECTIVES), self.adjective[rows]), noun, " ")
        name = pc.coalesce(pa.array(self.fixed_name[rows], pa.string()), made_up)
        slug = pc.binary_join_element_wise(
            pc.replace_substring(pc.utf8_lower(pc.take(pa.array(_ADJECTIVES), self.adjective[rows])), " ", "-"),
            pc.replace_substring(pc.take(pa.array([c.primary for c in TAXONOMY]), category), "_", "-"),
            pa.array(self.record[rows] % 10_000).cast(pa.string()),
            "-",
        )
        first_country = self.countries[rows, 0]
        dial = pa.array([_DIAL_CODES.get(c, "1") if c else "1" for c in first_country])
        phone = pc.binary_join_element_wise("+", dial, pa.array(self.phone[rows]).cast(pa.string()), "")
        confidence = self.confidence[rows]
        columns = {
            "id": uuid_strings(self.id_words[rows]),
            "geometry": _wkb_points(lng, lat),
            "bbox": pa.StructArray.from_arrays([lng, lng, lat, lat], fields=list(_BBOX_TYPE)),
            "version": pa.array(self.version[rows], pa.int32()),
            "sources": self._sources(rows, confidence),
            "names": pa.StructArray.from_arrays(
                [name, pa.nulls(n, _NAMES_TYPE.field("common").type), pa.nulls(n, _NAMES_TYPE.field("rules").type)],
                fields=list(_NAMES_TYPE),
            ),
            "confidence": pa.array(confidence, pa.float64(), from_pandas=True),
            "websites": _optional_list(
                pc.binary_join_element_wise("https://", slug, ".example.com/", ""), self.has_website[rows]
            ),
            "socials": _optional_list(
                pc.binary_join_element_wise(
                    "https://www.facebook.com/", pa.array(self.record[rows]).cast(pa.string()), ""
                ),
                self.has_social[rows],
            ),
            "emails": _optional_list(
                pc.binary_join_element_wise("info@", slug, ".example.com", ""), self.has_email[rows]
            ),
            "phones": _optional_list(phone, self.has_phone[rows]),
            "brand": pa.nulls(n, arrow_schema.field("brand").type),
            "addresses": self._addresses(rows),
        }
        if schema == "current":
            columns["basic_category"] = pc.take(pa.array([c.basic for c in TAXONOMY]), category)
            columns["taxonomy"] = pa.StructArray.from_arrays(
                [
                    pc.take(pa.array([c.primary for c in TAXONOMY]), category),
                    pc.take(pa.array([list(c.hierarchy) for c in TAXONOMY], _STRINGS), category),
                    self._alternates(rows),
                ],
                fields=list(_TAXONOMY_TYPE),
            )
            columns["operating_status"] = pc.take(pa.array(STATUSES), self.status[rows])
        else:
            columns["categories"] = pa.StructArray.from_arrays(
                [pc.take(pa.array([c.primary for c in TAXONOMY]), category), self._alternates(rows)],
                fields=list(_CATEGORIES_TYPE),
            )
        return pa.Table.from_arrays([columns[f.name] for f in arrow_schema], schema=arrow_schema)

    def _alternates(self, rows: np.ndarray) -> pa.Array:
        alternate = self.alternate[rows]
        names = pc.take(pa.array([c.primary for c in TAXONOMY]), np.maximum(alternate, 0))
        return _optional_list(names, alternate >= 0)

    def _sources(self, rows: np.ndarray, confidence: np.ndarray) -> pa.Array:
        n = len(rows)
        source = pa.StructArray.from_arrays(
            [
                pa.array([""] * n),
                pc.take(pa.array(_DATASETS), self.dataset[rows]),
                pa.nulls(n, pa.string()),
                pa.array(self.record[rows]).cast(pa.string()),
                pa.array(["2026-10-01T00:00:00.000Z"] * n),
                pa.array(confidence, pa.float64(), from_pandas=True),
                pa.nulls(n, pa.list_(pa.float64())),
            ],
            fields=list(_SOURCE_TYPE),
        )
        return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), source)

    def _addresses(self, rows: np.ndarray) -> pa.Array:
        counts = self.addresses[rows]
        owner = np.repeat(np.arange(len(rows)), counts)
        ordinal = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
        country = self.countries[rows][owner, ordinal]
        streets = [_STREETS.get(c, _DEFAULT_STREETS) for c in country]
        street_number = self.street[rows][owner] + ordinal
        freeform = pc.binary_join_element_wise(
            pa.array(self.house[rows][owner] + 7 * ordinal).cast(pa.string()),
            pa.array([s[i % len(s)] for s, i in zip(streets, street_number, strict=True)], pa.string()),
            " ",
        )
        locality = pa.array(self.locality[rows][owner], pa.string())
        entries = pa.StructArray.from_arrays(
            [
                freeform,
                pc.if_else(pc.equal(locality, ""), None, locality),
                pa.array(self.postcode[rows][owner] + ordinal).cast(pa.string()),
                pa.nulls(len(owner), pa.string()),
                pa.array(country, pa.string()),
            ],
            fields=list(_ADDRESS_TYPE),
        )
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), entries, mask=pa.array(counts == 0))


def _optional_list(values: pa.Array, present: np.ndarray) -> pa.Array:
    """One-element lists where ``present``, nulls elsewhere (Overture leaves absent lists null, not empty)."""
    offsets = np.concatenate([[0], np.cumsum(present)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values.filter(pa.array(present)), mask=pa.array(~present))


def _wkb_points(lng: np.ndarray, lat: np.ndarray) -> pa.Array:
    """Little-endian WKB points, 21 bytes each, built without a Python loop."""
    wkb = np.empty(len(lng), dtype=np.dtype([("order", "u1"), ("type", "<u4"), ("x", "<f8"), ("y", "<f8")]))
    wkb["order"], wkb["type"], wkb["x"], wkb["y"] = 1, 1, lng, lat
    offsets = np.arange(0, 21 * (len(lng) + 1), 21, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), len(lng), [None, pa.py_buffer(offsets), pa.py_buffer(wkb.tobytes())])


_HEX = np.frombuffer(b"0123456789abcdef", dtype="S1")


def random_uuid_words(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` random version 4 UUIDs, as Overture's ids are, each as a pair of 64-bit words (``uuid_strings``)."""
    words = rng.integers(0, 2**64, size=(count, 2), dtype=np.uint64)
    # The version and variant bits, set as uuid.uuid4 sets them; the other 122 bits are random.
    words[:, 0] = (words[:, 0] & np.uint64(0xFFFF_FFFF_FFFF_0FFF)) | np.uint64(0x0000_0000_0000_4000)
    words[:, 1] = (words[:, 1] & np.uint64(0x3FFF_FFFF_FFFF_FFFF)) | np.uint64(0x8000_0000_0000_0000)
    return words


def uuid_strings(words: np.ndarray) -> pa.Array:
    """UUID strings (lower-case, dashed) from pairs of 64-bit words, built without a Python loop."""
    octets = words.astype(">u8").view(np.uint8).reshape(len(words), 16)
    digits = np.stack([_HEX[octets >> 4], _HEX[octets & 15]], axis=2).reshape(len(words), 32)
    dashed = np.insert(digits, [8, 12, 16, 20], b"-", axis=1)
    return pa.array(dashed.view("S36").ravel()).cast(pa.string())


def _uuid(high: np.uint64, low: np.uint64) -> str:
    return uuid_strings(np.array([[high, low]], dtype=np.uint64))[0].as_py()


def _hilbert(lng: np.ndarray, lat: np.ndarray, order: int = 16) -> np.ndarray:
    """Each point's distance along a Hilbert curve over the globe, so that near points sort near each other."""
    side = 1 << order
    x = np.minimum(((lng + 180.0) / 360.0 * side).astype(np.int64), side - 1)
    y = np.minimum(((lat + 90.0) / 180.0 * side).astype(np.int64), side - 1)
    distance = np.zeros(len(x), dtype=np.int64)
    s = side >> 1
    while s > 0:
        rx = (x & s) > 0
        ry = (y & s) > 0
        distance += s * s * ((3 * rx) ^ ry)
        flip = ~ry & rx
        x = np.where(flip, side - 1 - x, x)
        y = np.where(flip, side - 1 - y, y)
        x, y = np.where(~ry, y, x), np.where(~ry, x, y)
        s >>= 1
    return distance


def _geo_metadata(table: pa.Table) -> bytes:
    """GeoParquet 1.1 metadata naming the bbox column as the geometry's covering, with the file's extent."""
    bbox = table.column("bbox")
    extent = [
        pc.min(pc.struct_field(bbox, "xmin")).as_py(),
        pc.min(pc.struct_field(bbox, "ymin")).as_py(),
        pc.max(pc.struct_field(bbox, "xmax")).as_py(),
        pc.max(pc.struct_field(bbox, "ymax")).as_py(),
    ]
    geometry = {
        "encoding": "WKB",
        "geometry_types": ["Point"],
        "bbox": extent,
        "covering": {"bbox": {key: ["bbox", key] for key in ("xmin", "ymin", "xmax", "ymax")}},
    }
    return json.dumps({"version": "1.1.0", "primary_column": "geometry", "columns": {"geometry": geometry}}).encode()


def publish_releases(client: Any, root: str | Path, bucket: str, prefix: str) -> str:
    """Every release under ``root`` uploaded to s3://bucket/prefix with a boto3 client, readable by anyone as
    Overture's bucket is; returns the s3:// root to read them from."""
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    public_read = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        ],
    }
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(public_read))
    for path in sorted(Path(root).rglob("*.parquet")):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return f"s3://{bucket}/{prefix}"
