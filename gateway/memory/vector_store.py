"""Vectors persisted in Redis: one hash per namespace (item id -> base64 of float32 bytes) and a
version counter bumped in the same transaction, so every process's cached index can tell it is
stale. Base64, because the store's client decodes every reply as text."""

from __future__ import annotations

import base64
from typing import Sequence

import numpy as np
import redis.asyncio as aioredis


def encode_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")


def decode_vector(text: str, dim: int) -> np.ndarray:
    vector = np.frombuffer(base64.b64decode(text), dtype=np.float32)
    if vector.shape != (dim,):
        raise ValueError(f"stored vector has {vector.size} dimensions, expected {dim}")
    return vector


async def put_vectors(redis: aioredis.Redis, vectors_key: str, version_key: str,
                      ids: Sequence[str], matrix: np.ndarray) -> None:
    """Store rows of `matrix` under `ids` and bump the version, atomically."""
    if len(ids) != len(matrix):
        raise ValueError("one vector per id")
    if not ids:
        return
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(vectors_key, mapping={i: encode_vector(v) for i, v in zip(ids, matrix)})
        pipe.incr(version_key)
        await pipe.execute()


async def delete_vectors(redis: aioredis.Redis, vectors_key: str, version_key: str,
                         ids: Sequence[str]) -> None:
    if not ids:
        return
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hdel(vectors_key, *ids)
        pipe.incr(version_key)
        await pipe.execute()
