"""The sample's places: generated as plain numbers, drifted a release later, made into Arrow tables a file at a time."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nakodo_dagster.overture.sample.drift import DROPPED_KEEPS, INFLATED_GAINS, ReleaseDrift
from nakodo_dagster.overture.sample.ids import random_uuid_words, uuid_strings
from nakodo_dagster.overture.sample.schema import (
    ADDRESS_TYPE,
    BBOX_TYPE,
    CATEGORIES_TYPE,
    NAMES_TYPE,
    SOURCE_TYPE,
    STRINGS,
    TAXONOMY_TYPE,
)
from nakodo_dagster.overture.sample.tables import (
    ADJECTIVES,
    BORDER_CITIES,
    BORDER_LOCALITIES,
    CITIES,
    DATASETS,
    DEFAULT_STREETS,
    DIAL_CODES,
    FIXED_PLACES,
    STATUS_SHARES,
    STATUSES,
    STREETS,
    TAXONOMY,
    border_country,
)
from nakodo_dagster.placement import KM_PER_DEGREE, MIN_COS_LAT


@dataclass
class Places:
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
    def generate(cls, rows: int, rng: np.random.Generator) -> Places:
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
        border = np.isin(city, [i for i, c in enumerate(CITIES) if c.name in BORDER_CITIES])
        border_countries = border_country(lat[border], lng[border])
        country[border] = border_countries
        basel = border & (locality == "Basel")
        locality[basel] = [BORDER_LOCALITIES[c] for c in country[basel]]

        category_weights = np.array([c.weight for c in TAXONOMY])
        category = rng.choice(len(TAXONOMY), size=n, p=category_weights / category_weights.sum())
        alternate = np.where(rng.random(n) < 0.1, rng.integers(0, len(TAXONOMY), n), -1)
        # Overture: an alternate is never in the primary's hierarchy, nor the primary itself.
        related = np.array([[b.primary in a.hierarchy or a.primary in b.hierarchy for b in TAXONOMY] for a in TAXONOMY])
        alternate[(alternate >= 0) & related[category, np.maximum(alternate, 0)]] = -1

        confidence = np.round(rng.beta(5.0, 2.0, n), 4)
        confidence[rng.random(n) < 0.01] = np.nan
        status = rng.choice(len(STATUSES), size=n, p=STATUS_SHARES)
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
            adjective=rng.integers(0, len(ADJECTIVES), rows),
            house=rng.integers(1, 300, rows),
            street=rng.integers(0, 1000, rows),
            postcode=rng.integers(1000, 99999, rows),
            phone=rng.integers(10**8, 10**9, rows),
            has_phone=rng.random(rows) < 0.8,
            has_website=rng.random(rows) < 0.6,
            has_email=rng.random(rows) < 0.1,
            has_social=rng.random(rows) < 0.5,
            version=rng.integers(0, 6, rows, dtype=np.int32),
            dataset=rng.choice(len(DATASETS), size=rows, p=(0.8, 0.1, 0.07, 0.03)),
            record=rng.integers(10**14, 10**15, rows),
            id_words=random_uuid_words(rng, rows),
            fixed_name=np.concatenate(
                [np.array([f.name for f in fixed], dtype=object), np.full(n, None, dtype=object)]
            ),
        )

    def _take(self, index: np.ndarray) -> Places:
        return Places(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def _concat(parts: list[Places]) -> Places:
        return Places(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Places)})

    def _new(self, count: int, rng: np.random.Generator) -> Places:
        """``count`` new places (new ids), spread as the sample's are, without the fixed ones."""
        return Places.generate(count + len(FIXED_PLACES), rng)._take(
            np.arange(len(FIXED_PLACES), count + len(FIXED_PLACES))
        )

    def drifted(self, drift: ReleaseDrift, rng: np.random.Generator) -> Places:
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
        later = Places._concat(parts)
        if drift.edited or drift.reissued:
            later._edit_and_reissue(drift, np.random.default_rng(rng.integers(2**63)), kept=int(keep.sum()))
        return later

    def _edit_and_reissue(self, drift: ReleaseDrift, rng: np.random.Generator, kept: int) -> None:
        """Edit and reissue shares of the first ``kept`` places (those carried over), never the fixed ones."""
        carried = np.zeros(len(self.lat), dtype=bool)
        carried[len(FIXED_PLACES) : kept] = True
        draw = rng.random(len(self.lat))
        edited = carried & (draw < drift.edited)
        reissued = carried & (draw >= drift.edited) & (draw < drift.edited + drift.reissued)
        self.adjective[edited] = (self.adjective[edited] + 1) % len(ADJECTIVES)
        self.confidence[edited] = np.round(rng.beta(5.0, 2.0, int(edited.sum())), 4)
        # Overture raises a feature's version when its data changes.
        self.version[edited] += 1
        self.id_words[reissued] = random_uuid_words(rng, int(reissued.sum()))

    def table(self, rows: np.ndarray, schema: str, arrow_schema: pa.Schema) -> pa.Table:
        """The places at the given indices as an Arrow table in the given flavour."""
        n = len(rows)
        lat, lng = self.lat[rows], self.lng[rows]
        category = self.category[rows]
        noun = pc.take(pa.array([c.noun for c in TAXONOMY]), category)
        made_up = pc.binary_join_element_wise(pc.take(pa.array(ADJECTIVES), self.adjective[rows]), noun, " ")
        name = pc.coalesce(pa.array(self.fixed_name[rows], pa.string()), made_up)
        slug = pc.binary_join_element_wise(
            pc.replace_substring(pc.utf8_lower(pc.take(pa.array(ADJECTIVES), self.adjective[rows])), " ", "-"),
            pc.replace_substring(pc.take(pa.array([c.primary for c in TAXONOMY]), category), "_", "-"),
            pa.array(self.record[rows] % 10_000).cast(pa.string()),
            "-",
        )
        first_country = self.countries[rows, 0]
        dial = pa.array([DIAL_CODES.get(c, "1") if c else "1" for c in first_country])
        phone = pc.binary_join_element_wise("+", dial, pa.array(self.phone[rows]).cast(pa.string()), "")
        confidence = self.confidence[rows]
        columns = {
            "id": uuid_strings(self.id_words[rows]),
            "geometry": _wkb_points(lng, lat),
            "bbox": pa.StructArray.from_arrays([lng, lng, lat, lat], fields=list(BBOX_TYPE)),
            "version": pa.array(self.version[rows], pa.int32()),
            "sources": self._sources(rows, confidence),
            "names": pa.StructArray.from_arrays(
                [name, pa.nulls(n, NAMES_TYPE.field("common").type), pa.nulls(n, NAMES_TYPE.field("rules").type)],
                fields=list(NAMES_TYPE),
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
                    pc.take(pa.array([list(c.hierarchy) for c in TAXONOMY], STRINGS), category),
                    self._alternates(rows),
                ],
                fields=list(TAXONOMY_TYPE),
            )
            columns["operating_status"] = pc.take(pa.array(STATUSES), self.status[rows])
        else:
            columns["categories"] = pa.StructArray.from_arrays(
                [pc.take(pa.array([c.primary for c in TAXONOMY]), category), self._alternates(rows)],
                fields=list(CATEGORIES_TYPE),
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
                pc.take(pa.array(DATASETS), self.dataset[rows]),
                pa.nulls(n, pa.string()),
                pa.array(self.record[rows]).cast(pa.string()),
                pa.array(["2026-10-01T00:00:00.000Z"] * n),
                pa.array(confidence, pa.float64(), from_pandas=True),
                pa.nulls(n, pa.list_(pa.float64())),
            ],
            fields=list(SOURCE_TYPE),
        )
        return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), source)

    def _addresses(self, rows: np.ndarray) -> pa.Array:
        counts = self.addresses[rows]
        owner = np.repeat(np.arange(len(rows)), counts)
        ordinal = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
        country = self.countries[rows][owner, ordinal]
        streets = [STREETS.get(c, DEFAULT_STREETS) for c in country]
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
            fields=list(ADDRESS_TYPE),
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
