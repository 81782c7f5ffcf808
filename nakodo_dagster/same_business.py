"""Whether a place gone from a pair and a place that arrived in it are one business under a new Overture id, by name
and distance: the fallback for places that share no source record (the first evidence, in ``store/changes.py``).

Overture's own matcher links places more than 100 m apart and with moderately similar names, so a reissued id may
move and be spelled another way. Two places are the same business by name when they lie within ``REISSUE_METRES``
of each other and their names, compared as ``name_key`` folds them, are similar (``similar_names``): the same, one
inside the other, or at most a quarter of the longer one's characters apart. Each gone place is linked to its best
such arrival and each arrival to its best such gone place (the more similar name, then the nearer, then the lower
id), and only where both agree: two shops of one chain side by side pair up one to one, and the same answer comes
back whatever order the rows come in. Pure functions: names and distances in, links out.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# Overture's matcher links places more than 100 m apart; a reissue moved 80 to 150 m still has to be found.
REISSUE_METRES = 200.0
# 1 - edits / the longer key's length: "Golden Bakery" and "Golden Bakrey" are 0.83 (two edits in twelve).
NAME_SIMILARITY = 0.75
# A key this long or longer found inside the other name is the same name with words added ("Starbucks" and
# "Starbucks Pearl St"); shorter ones ("bar", "spa") are inside too many names to tell anything.
MIN_CONTAINED = 5


def name_key(name: str | None) -> str:
    """A name as compared: case-folded, accents taken off, only its letters and digits ("Café de Flore" is
    "cafedeflore"), in any script."""
    decomposed = unicodedata.normalize("NFKD", (name or "").casefold())
    return "".join(character for character in decomposed if character.isalnum())


def edit_distance(first: str, second: str) -> int:
    """The Levenshtein distance: the fewest characters inserted, deleted or replaced to turn one into the other."""
    if len(first) < len(second):
        first, second = second, first
    previous = list(range(len(second) + 1))
    for i, character in enumerate(first, start=1):
        current = [i]
        for j, other in enumerate(second, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (character != other)))
        previous = current
    return previous[-1]


def name_similarity(first: str, second: str) -> float:
    """How alike two name keys are, from 0 to 1: one less the edits between them over the longer one's length."""
    longer = max(len(first), len(second))
    return 1.0 if longer == 0 else 1 - edit_distance(first, second) / longer


def similar_names(first: str, second: str) -> bool:
    """Whether two name keys name one business: the same, one inside the other (``MIN_CONTAINED`` characters or
    more), or ``NAME_SIMILARITY`` alike. A place without a name is like none."""
    if not first or not second:
        return False
    shorter, longer = sorted((first, second), key=len)
    if len(shorter) >= MIN_CONTAINED and shorter in longer:
        return True
    return name_similarity(first, second) >= NAME_SIMILARITY


@dataclass(frozen=True)
class Candidate:
    """A gone place and an arrived one of the same pair within ``REISSUE_METRES``: their ids, names and distance."""

    area: str
    category: str
    old_id: str
    new_id: str
    metres: float
    old_name: str | None
    new_name: str | None


def name_links(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The candidates that are one business by name: similar names, and each the other's best (more similar, then
    nearer, then the lower id), within its pair. Sorted, so the answer does not depend on the candidates' order."""
    similar = []
    for candidate in candidates:
        old, new = name_key(candidate.old_name), name_key(candidate.new_name)
        if candidate.metres <= REISSUE_METRES and similar_names(old, new):
            similar.append((-name_similarity(old, new), candidate.metres, candidate))
    best_arrival: dict[tuple[str, str, str], Candidate] = {}
    best_gone: dict[tuple[str, str, str], Candidate] = {}
    for _, _, candidate in sorted(
        similar, key=lambda ranked: (ranked[0], ranked[1], ranked[2].old_id, ranked[2].new_id)
    ):
        best_arrival.setdefault((candidate.area, candidate.category, candidate.old_id), candidate)
        best_gone.setdefault((candidate.area, candidate.category, candidate.new_id), candidate)
    return sorted(
        (c for c in best_arrival.values() if best_gone[(c.area, c.category, c.new_id)] is c),
        key=lambda c: (c.area, c.category, c.old_id),
    )
