"""Every key of a store with its value, to look for text that must not be there."""

from __future__ import annotations

from typing import Any

import redis


def dump(*urls: str) -> dict[str, Any]:
    """Every key of every node (`urls`: one for a single server) with its value, whatever its
    type."""
    out: dict[str, Any] = {}
    for url in urls:
        with redis.Redis.from_url(url, decode_responses=True) as r:
            for name in r.scan_iter(count=1000):
                kind = r.type(name)
                out[name] = {
                    "string": lambda: r.get(name), "hash": lambda: r.hgetall(name),
                    "list": lambda: r.lrange(name, 0, -1),
                    "set": lambda: sorted(r.smembers(name)),
                    "zset": lambda: r.zrange(name, 0, -1, withscores=True),
                    "stream": lambda: r.xrange(name, "-", "+"),
                }[kind]()
    return out


def keys_mentioning(urls: tuple[str, ...], word: str) -> list[str]:
    return sorted(name for name, value in dump(*urls).items()
                  if word.lower() in f"{name} {value!r}".lower())
