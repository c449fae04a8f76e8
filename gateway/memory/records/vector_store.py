"""Vectors persisted in Redis: one hash per namespace (item id -> encoded vector) and a
version counter bumped in the same transaction, so every process's cached index can tell it is
stale.

Every stored vector names its vector space: "<space>:<base64 of float32 bytes>", where the
space is a short digest of the embedder's name and dimension (`space_of`). Two embedders of
one dimension (e5-small and MiniLM both embed into 384) make vectors that must never be
compared; with the space beside each vector a reader tells them apart without any other
state, a re-index replaces them one by one, and the user-level index copies them as they are.
A vector written before spaces were recorded (no tag) is taken as USE multilingual v3's, the
only embedder there was (`LEGACY_SPACE`). Base64, because the store's client decodes every
reply as text.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Protocol, Sequence

import numpy as np
import redis.asyncio as aioredis

from gateway.memory.records.writes import Direct, Writes
from gateway.store.versions import bump_version


class _Named(Protocol):
    name: str
    dim: int


def space_of(embedder: _Named) -> str:
    """The tag of `embedder`'s vector space: 12 hex digits of sha256(name, dimension)."""
    return space_tag(embedder.name, embedder.dim)


def space_tag(name: str, dim: int) -> str:
    return hashlib.sha256(f"{name}\0{dim}".encode()).hexdigest()[:12]


LEGACY_SPACE = space_tag("use-multilingual-v3", 512)
"""Untagged vectors were all written by the default embedder before spaces were recorded."""


class ForeignVector(ValueError):
    """A stored vector of another vector space (another embedder) or dimension."""


def encode_vector(vector: np.ndarray, space: str) -> str:
    raw = base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")
    return f"{space}:{raw}"


def vector_space(text: str) -> str:
    """The space a stored vector was written in (`LEGACY_SPACE` for an untagged one)."""
    space, sep, _ = text.partition(":")
    return space if sep else LEGACY_SPACE


def decode_vector(text: str, dim: int, space: str) -> np.ndarray:
    """The vector stored as `text`. Raises ForeignVector when it belongs to another space or
    has another dimension: it must not be compared with vectors of `space`."""
    stored_space, sep, raw = text.partition(":")
    if not sep:
        stored_space, raw = LEGACY_SPACE, text
    if stored_space != space:
        raise ForeignVector("stored vector belongs to another embedder's space")
    vector = np.frombuffer(base64.b64decode(raw), dtype=np.float32)
    if vector.shape != (dim,):
        raise ForeignVector(f"stored vector has {vector.size} dimensions, expected {dim}")
    return vector


async def put_vectors(redis: aioredis.Redis, vectors_key: str, version_key: str,
                      ids: Sequence[str], matrix: np.ndarray, space: str, *,
                      writes: Writes | None = None) -> None:
    """Store rows of `matrix` (vectors of `space`) under `ids` and bump the version,
    atomically, in a transaction of `writes` (default: direct on `redis`)."""
    if len(ids) != len(matrix):
        raise ValueError("one vector per id")
    if not ids:
        return
    async with (writes or Direct(redis)).transaction() as pipe:
        pipe.hset(vectors_key, mapping={i: encode_vector(v, space) for i, v in zip(ids, matrix)})
        bump_version(pipe, version_key)
        await pipe.execute()


async def delete_vectors(redis: aioredis.Redis, vectors_key: str, version_key: str,
                         ids: Sequence[str], *, writes: Writes | None = None) -> None:
    if not ids:
        return
    async with (writes or Direct(redis)).transaction() as pipe:
        pipe.hdel(vectors_key, *ids)
        bump_version(pipe, version_key)
        await pipe.execute()
