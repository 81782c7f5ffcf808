"""A file of campaigns, as ``nakodo campaign import`` takes it: one row per location (a CSV line, a GeoJSON feature,
a GeoParquet row), the rows that share an account and a name one campaign; every row checked as ``campaign add``
checks its options, and every problem kept by row rather than the first one raised."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
from shapely.geometry import Point

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import RADII_KM, CountryLocation, Location, PointLocation, Targeting, check_categories
from nakodo_dagster.store import DEFAULT_ACCOUNT_ID, NewCampaign, check_campaign_name
from nakodo_dagster.store.models import check_id
from nakodo_dagster.words import plural

# Each row's fields; lat and lng are a CSV's own, the other formats' points being their geometry.
FIELDS = ("name", "account", "lat", "lng", "radius_km", "country", "categories")
REQUIRED = ("name", "categories")
CATEGORY_SEPARATOR = ";"
_RADII = ", ".join(str(r) for r in RADII_KM)
T = TypeVar("T")


@dataclass(frozen=True)
class FileFormat:
    """How a format's rows are named in a problem (``line 4``) and what its point is."""

    row: str
    point: str
    fields: tuple[str, ...]


CSV = FileFormat("line", "lat and lng", FIELDS)
GEOJSON = FileFormat("feature", "a Point geometry", tuple(f for f in FIELDS if f not in ("lat", "lng")))
GEOPARQUET = FileFormat("row", "a Point geometry", GEOJSON.fields)


@dataclass(frozen=True)
class Row:
    """A row as read: its number (a CSV's line, or the feature or row counted from 1), its fields (None where
    empty), and what its reading found wrong already."""

    number: int
    values: Mapping[str, object]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileCampaign:
    """A campaign of the file and the rows it came from, one per location."""

    campaign: NewCampaign
    rows: tuple[int, ...]


@dataclass(frozen=True)
class CampaignFile:
    """What a campaign file holds: its campaigns in the file's order, and its rows' problems by row number."""

    format: FileFormat
    rows: int
    campaigns: list[FileCampaign]
    problems: dict[int, list[str]]
    accounts: dict[int, int]
    """The account each row names, by row number, where it is a valid id."""

    def where(self, rows: Sequence[int]) -> str:
        """``line 4``, or ``lines 4, 9``."""
        return f"{self.format.row}{'s' if len(rows) > 1 else ''} {', '.join(str(r) for r in rows)}"

    def campaign_problem(self, index: int, why: str) -> tuple[int, str]:
        """Why the store refused campaign ``index``, kept at its first row and naming its rows if it has several."""
        rows, name = self.campaigns[index].rows, self.campaigns[index].campaign.name
        return rows[0], (f"campaign {name!r} ({self.where(rows)}): {why}" if len(rows) > 1 else why)

    def refusal(self, problems: Mapping[int, Sequence[str]]) -> str:
        """Every refused row in the file's order, each with its problems: what the user reads."""
        rows = [f"  {self.where([number])}: {'; '.join(problems[number])}" for number in sorted(problems)]
        header = f"{plural(len(problems), self.format.row)} of {self.rows:,} refused, nothing written:"
        return "\n".join([header, *rows])


def read_campaign_file(path: Path) -> CampaignFile:
    """The campaigns of a .csv, .geojson (or .json) or .parquet (GeoParquet) file; InvalidInput, with nothing else
    said, when the file as a whole is not one (unreadable, no header, a field that is not known)."""
    readers: dict[str, tuple[FileFormat, Callable[[Path], list[Row]]]] = {
        ".csv": (CSV, _csv_rows),
        ".geojson": (GEOJSON, _geojson_rows),
        ".json": (GEOJSON, _geojson_rows),
        ".parquet": (GEOPARQUET, _geoparquet_rows),
        ".geoparquet": (GEOPARQUET, _geoparquet_rows),
    }
    if path.suffix.lower() not in readers:
        raise InvalidInput(
            f"{path} is not a campaign file by its name: use .csv, .geojson (or .json) or .parquet (GeoParquet)"
        )
    file_format, read = readers[path.suffix.lower()]
    try:
        rows = read(path)
    except OSError as exc:
        raise InvalidInput(f"{path} cannot be read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InvalidInput(f"{path} is not a CSV file of UTF-8 text: {exc}") from exc
    return campaigns_of(file_format, rows)


def campaigns_of(file_format: FileFormat, rows: Iterable[Row]) -> CampaignFile:
    """The rows' campaigns (rows of one account and name are one campaign's locations) and every row's problems."""
    rows = list(rows)
    problems: dict[int, list[str]] = {}
    accounts: dict[int, int] = {}
    by_key: dict[tuple[int, str], tuple[list[int], list[Location], tuple[str, ...]]] = {}
    for row in rows:
        found = list(row.problems)
        values = row.values
        # An empty name is refused as text, '' rather than None.
        name = _checked(found, check_campaign_name, values.get("name") or "")
        account_id = _checked(found, _account_id, values.get("account"))
        if account_id is not None:
            accounts[row.number] = account_id
        # A row read wrong (its geometry, its shape) has no location worth a second problem.
        location = None if row.problems else _checked(found, _location, file_format, values)
        categories = _checked(found, _categories, values.get("categories"))
        if not found:
            first = by_key.get((account_id, name))
            if first is None:
                by_key[account_id, name] = ([row.number], [location], categories)
            elif categories != first[2]:
                found.append(
                    f"its categories ({', '.join(categories)}) are not those of {file_format.row} {first[0][0]} "
                    f"({', '.join(first[2])}): every row of campaign {name!r} of account {account_id} names the same"
                )
            elif location in first[1]:
                at = first[0][first[1].index(location)]
                found.append(f"campaign {name!r} of account {account_id} has this location on {file_format.row} {at}")
            else:
                first[0].append(row.number)
                first[1].append(location)
        if found:
            problems[row.number] = found
    campaigns = [
        FileCampaign(NewCampaign(name, account_id, Targeting(tuple(locations), categories)), tuple(numbers))
        for (account_id, name), (numbers, locations, categories) in by_key.items()
    ]
    return CampaignFile(file_format, len(rows), campaigns, problems, accounts)


def _checked(problems: list[str], check: Callable[..., T], *args: object) -> T | None:
    """What ``check(*args)`` returns, or None with its InvalidInput kept among ``problems``."""
    try:
        return check(*args)
    except InvalidInput as exc:
        problems.append(str(exc))
        return None


def _whole(value: object) -> object:
    """A whole number as an int, from text or a float (a GeoParquet column with an empty cell is a float one);
    anything else as it is, for its check to refuse."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def _number(value: object) -> object:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _account_id(value: object) -> int:
    return DEFAULT_ACCOUNT_ID if value is None else check_id("account", _whole(value))


def _categories(value: object) -> tuple[str, ...]:
    """A CSV's ``cafe;pub``, or a list of them, checked."""
    if isinstance(value, str):
        value = value.split(CATEGORY_SEPARATOR)
    if value is None:
        value = ()
    elif not isinstance(value, list | tuple):
        value = (value,)
    stripped = (c.strip() if isinstance(c, str) else c for c in value)
    return check_categories(c for c in stripped if c not in ("", None))


def _location(file_format: FileFormat, values: Mapping[str, object]) -> Location:
    """A point with a radius, or a whole country: exactly one, checked as ``campaign add`` checks --at and --country."""
    point = [values.get("lat"), values.get("lng")]
    radius_km, country = values.get("radius_km"), values.get("country")
    given_point = any(v is not None for v in point)
    if country is not None:
        if given_point or radius_km is not None:
            raise InvalidInput(
                f"give {file_format.point} with radius_km, or country, not both: a country is taken whole"
            )
        return CountryLocation(str(country).strip().upper())
    if not given_point:
        raise InvalidInput(
            f"no location: give {file_format.point} with radius_km (km: {_RADII}), or country (an ISO 3166-1 "
            "alpha-2 code, e.g. FR)"
        )
    if None in point:
        raise InvalidInput("a point needs both lat and lng, in decimal degrees")
    if radius_km is None:
        raise InvalidInput(f"radius_km is needed with a point; allowed: {_RADII}")
    lat, lng = (_number(v) for v in point)
    return PointLocation(lat, lng, _whole(radius_km))


def _unknown_fields(file_format: FileFormat, names: Iterable[str], kind: str) -> None:
    unknown = [name for name in names if name not in file_format.fields]
    if unknown:
        raise InvalidInput(
            f"{kind} {', '.join(repr(name) for name in unknown)} {'is' if len(unknown) == 1 else 'are'} not known; "
            f"allowed: {', '.join(file_format.fields)} ({', '.join(REQUIRED)} needed)"
        )


def _present(value: object) -> object:
    """None for an empty cell: blank text, or a missing number (NaN)."""
    if isinstance(value, str) and not value.strip():
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


# CSV ----------------------------------------------------------------------------------------------------------


def _csv_rows(path: Path) -> list[Row]:
    # utf-8-sig: a spreadsheet's CSV often starts with a byte order mark.
    with path.open(newline="", encoding="utf-8-sig") as file:
        reader = csv.DictReader(file)
        header = reader.fieldnames
        if not header:
            raise InvalidInput(f"{path} is empty: its first line names the columns, e.g. {','.join(FIELDS)}")
        _unknown_fields(CSV, (name.strip() for name in header), "column")
        missing = [name for name in REQUIRED if name not in (h.strip() for h in header)]
        if missing:
            raise InvalidInput(f"{path} has no column {', '.join(missing)}; columns: {', '.join(FIELDS)}")
        rows = []
        for record in reader:
            extra = record.pop(None, None)
            problems = (f"{len(extra)} values more than the header's {len(header)} columns",) if extra else ()
            values = {name.strip(): _present(value) for name, value in record.items()}
            rows.append(Row(reader.line_num, values, problems))
        return rows


# GeoJSON and GeoParquet ---------------------------------------------------------------------------------------


def _geometry_values(geometry: object) -> tuple[dict[str, object], tuple[str, ...]]:
    """lat and lng of a Point geometry (a GeoJSON mapping or a shapely geometry), none of no geometry, or why not."""
    if geometry is None or getattr(geometry, "is_empty", False):
        return {}, ()
    if isinstance(geometry, Point):
        return {"lat": geometry.y, "lng": geometry.x}, ()
    if isinstance(geometry, Mapping) and geometry.get("type") == "Point":
        coordinates = geometry.get("coordinates")
        if isinstance(coordinates, list) and len(coordinates) in (2, 3):
            return {"lat": coordinates[1], "lng": coordinates[0]}, ()
        return {}, ("a Point's coordinates are [longitude, latitude] in decimal degrees",)
    kind = geometry.get("type") if isinstance(geometry, Mapping) else getattr(geometry, "geom_type", "?")
    return {}, (f"geometry {kind!r} is not allowed: a Point (the centre, with radius_km), or none (with country)",)


def _geojson_rows(path: Path) -> list[Row]:
    shape = 'a FeatureCollection: {"type": "FeatureCollection", "features": [...]}'
    try:
        collection = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not GeoJSON ({exc}): use {shape}") from exc
    if not isinstance(collection, dict) or collection.get("type") != "FeatureCollection":
        raise InvalidInput(f"{path} is not {shape}")
    features = collection.get("features")
    if not isinstance(features, list):
        raise InvalidInput(f"{path} has no list of features: use {shape}")
    properties = [f.get("properties") or {} if isinstance(f, dict) else {} for f in features]
    _unknown_fields(GEOJSON, dict.fromkeys(name for p in properties if isinstance(p, dict) for name in p), "property")
    rows = []
    for number, (feature, given) in enumerate(zip(features, properties, strict=True), start=1):
        if not isinstance(feature, dict) or feature.get("type") != "Feature" or not isinstance(given, dict):
            rows.append(Row(number, {}, ('not a Feature: {"type": "Feature", "geometry": ..., "properties": {...}}',)))
            continue
        point, problems = _geometry_values(feature.get("geometry"))
        rows.append(Row(number, {**{k: _present(v) for k, v in given.items()}, **point}, problems))
    return rows


def _geoparquet_rows(path: Path) -> list[Row]:
    # Here, not at the top: geopandas and pandas take most of a second to import, which every other command would pay.
    import geopandas as gpd

    try:
        frame = gpd.read_parquet(path)
    except (ValueError, pa.ArrowException) as exc:
        raise InvalidInput(f"{path} is not GeoParquet ({exc}): write it with geopandas' to_parquet") from exc
    if frame.crs is not None and frame.crs.to_epsg() != 4326:
        frame = frame.to_crs(4326)
    geometry = frame.geometry.name
    _unknown_fields(GEOPARQUET, (name for name in frame.columns if name != geometry), "column")
    rows = []
    for number, record in enumerate(frame.to_dict("records"), start=1):
        point, problems = _geometry_values(record.pop(geometry))
        values = {
            name: _present(value.tolist() if hasattr(value, "tolist") else value) for name, value in record.items()
        }
        rows.append(Row(number, {**values, **point}, problems))
    return rows
