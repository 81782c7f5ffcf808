"""Random version 4 UUIDs, as Overture's ids are, made and written out without a Python loop."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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


def uuid_of(high: np.uint64, low: np.uint64) -> str:
    return uuid_strings(np.array([[high, low]], dtype=np.uint64))[0].as_py()
