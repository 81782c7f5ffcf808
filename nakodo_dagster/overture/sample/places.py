"""The sample's places: generated as plain numbers, drifted a release later, made into Arrow tables a file at a time."""

from __future__ import annotations

import itertools
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
    # A second source record (a place two were merged into cites both), -1 where none.
    dataset2: np.ndarray
    record2: np.ndarray
    # The source record of the place this one lists a second time, -1 for a place of its own.
    duplicate_of: np.ndarray

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
            dataset2=np.full(rows, -1),
            record2=np.full(rows, -1, dtype=np.int64),
            duplicate_of=np.full(rows, -1, dtype=np.int64),
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
        if any(drift.kept_shares()) or drift.merged:
            later = later._change_kept(drift, np.random.default_rng(rng.integers(2**63)), kept=int(keep.sum()))
        return later

    def _change_kept(self, drift: ReleaseDrift, rng: np.random.Generator, kept: int) -> Places:
        """These places with shares of the first ``kept`` (those carried over, never the fixed ones) changed as
        ``drift`` says; each place changes in one way at most."""
        carried = np.zeros(len(self.lat), dtype=bool)
        carried[len(FIXED_PLACES) : kept] = True
        draw = rng.random(len(self.lat))
        bounds = np.cumsum((0.0, *drift.kept_shares()))
        edited, reissued, moved, resourced, closed, split, duplicated = (
            carried & (draw >= low) & (draw < high) for low, high in itertools.pairwise(bounds)
        )
        self.adjective[edited] = (self.adjective[edited] + 1) % len(ADJECTIVES)
        self.confidence[edited] = np.round(rng.beta(5.0, 2.0, int(edited.sum())), 4)
        # Overture raises a feature's version when its data changes.
        self.version[edited] += 1
        self.id_words[reissued] = random_uuid_words(rng, int(reissued.sum()))
        if not any(drift.kept_shares()[2:]) and not drift.merged:
            # What a month of edits and reissues alone has always written: no more draws.
            return self
        self._reissue_moved(np.flatnonzero(moved), 80.0, 150.0, rng)
        self._respell(np.flatnonzero(moved), rng)
        self._resource(np.flatnonzero(resourced), rng)
        shut = np.flatnonzero(closed)
        self.status[shut] = STATUSES.index("permanently_closed")
        self.confidence[shut[rng.random(len(shut)) < 0.5]] = 0.0
        self.version[shut] += 1
        parts = [self, self._split(np.flatnonzero(split), rng), self._duplicate(np.flatnonzero(duplicated), rng)]
        # Only places no other change touched this month merge: each cites its records of the month before.
        merged_away = self._merge(carried & (draw >= bounds[-1]), drift.merged, rng)
        later = Places._concat(parts)
        return later._take(np.setdiff1d(np.arange(len(later.lat)), merged_away))

    def _reissue_moved(self, rows: np.ndarray, low_metres: float, high_metres: float, rng: np.random.Generator) -> None:
        """The places at ``rows`` under new ids, each moved a distance from ``low_metres`` to ``high_metres``."""
        self.id_words[rows] = random_uuid_words(rng, len(rows))
        self.lat[rows], self.lng[rows] = _moved(self.lat[rows], self.lng[rows], low_metres, high_metres, rng)
        self.version[rows] = 0

    def _respell(self, rows: np.ndarray, rng: np.random.Generator) -> None:
        """The places at ``rows`` spelled another way, as sources do: a letter dropped, two swapped, the town added,
        or all in capitals."""
        nouns = [c.noun for c in TAXONOMY]
        for row, how, where in zip(rows, rng.integers(0, 4, len(rows)), rng.random(len(rows)), strict=True):
            name = self.fixed_name[row] or f"{ADJECTIVES[self.adjective[row]]} {nouns[self.category[row]]}"
            at = 1 + int(where * (len(name) - 2))
            ways = (
                name[:at] + name[at + 1 :],
                name[:at] + name[at + 1] + name[at] + name[at + 2 :],
                name.upper(),
                f"{name} {self.locality[row]}".strip(),
            )
            # Two letters alike swapped, or a name in capitals already, would spell it the same: the next way does not.
            self.fixed_name[row] = next(way for way in (*ways[how:], *ways[:how]) if way != name)

    def _resource(self, rows: np.ndarray, rng: np.random.Generator) -> None:
        """The places at ``rows`` under new ids and new source records of another dataset, up to 120 m off, half of
        them spelled another way."""
        self._reissue_moved(rows, 0.0, 120.0, rng)
        self.dataset[rows] = (self.dataset[rows] + 1) % len(DATASETS)
        self.record[rows] = rng.integers(10**14, 10**15, len(rows))
        self._respell(rows[rng.random(len(rows)) < 0.5], rng)

    def _split(self, rows: np.ndarray, rng: np.random.Generator) -> Places:
        """The places at ``rows`` become two: they come back under new ids, and the second parts, another business's
        name 30 to 80 m off under new ids too, cite the same source record. Returns the second parts."""
        self.id_words[rows] = random_uuid_words(rng, len(rows))
        second = self._take(rows)
        second._reissue_moved(np.arange(len(rows)), 30.0, 80.0, rng)
        second.adjective = (second.adjective + len(ADJECTIVES) // 2) % len(ADJECTIVES)
        second.fixed_name[:] = None
        return second

    def _duplicate(self, rows: np.ndarray, rng: np.random.Generator) -> Places:
        """Second listings of the places at ``rows``, by another dataset, 5 to 30 m off and spelled another way."""
        second = self._take(rows)
        everyone = np.arange(len(rows))
        second._reissue_moved(everyone, 5.0, 30.0, rng)
        second._respell(everyone, rng)
        second.duplicate_of = self.record[rows].copy()
        second.dataset = (second.dataset + 1) % len(DATASETS)
        second.record = rng.integers(10**14, 10**15, len(rows))
        return second

    def _merge(self, untouched: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
        """A ``share`` of the ``untouched`` second listings merged into the place they duplicate, if it is untouched
        too: it comes back under a new id citing both source records. Returns the rows of the second listings, to be
        taken out."""
        listings = np.flatnonzero(untouched & (self.duplicate_of >= 0))
        listings = listings[rng.random(len(listings)) < share]
        original = {int(record): row for row, record in enumerate(self.record) if untouched[row]}
        pairs = [(original[int(self.duplicate_of[d])], d) for d in listings if int(self.duplicate_of[d]) in original]
        into = np.array([place for place, _ in pairs], dtype=np.int64)
        away = np.array([listing for _, listing in pairs], dtype=np.int64)
        self.id_words[into] = random_uuid_words(rng, len(into))
        self.dataset2[into], self.record2[into] = self.dataset[away], self.record[away]
        return away

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
        """Each place's source records: its own, and a second where two places were merged into it."""
        counts = 1 + (self.record2[rows] >= 0)
        owner = np.repeat(np.arange(len(rows)), counts)
        second = np.arange(len(owner)) > np.repeat(np.cumsum(counts) - counts, counts)
        dataset = np.where(second, self.dataset2[rows][owner], self.dataset[rows][owner])
        record = np.where(second, self.record2[rows][owner], self.record[rows][owner])
        m = len(owner)
        source = pa.StructArray.from_arrays(
            [
                pa.array([""] * m),
                pc.take(pa.array(DATASETS), dataset),
                pa.nulls(m, pa.string()),
                pa.array(record).cast(pa.string()),
                pa.array(["2026-10-01T00:00:00.000Z"] * m),
                pa.array(confidence[owner], pa.float64(), from_pandas=True),
                pa.nulls(m, pa.list_(pa.float64())),
            ],
            fields=list(SOURCE_TYPE),
        )
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), source)

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


def _moved(
    lat: np.ndarray, lng: np.ndarray, low_metres: float, high_metres: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The points moved each a distance from ``low_metres`` to ``high_metres`` in a random direction, to 7 decimals
    as Overture's coordinates are."""
    metres = rng.uniform(low_metres, high_metres, len(lat))
    bearing = rng.uniform(0.0, 2 * np.pi, len(lat))
    north = metres * np.cos(bearing) / (KM_PER_DEGREE * 1000)
    east = metres * np.sin(bearing) / (KM_PER_DEGREE * 1000 * np.maximum(np.cos(np.radians(lat)), MIN_COS_LAT))
    return np.round(np.clip(lat + north, -90.0, 90.0), 7), np.round((lng + east + 180.0) % 360.0 - 180.0, 7)


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
