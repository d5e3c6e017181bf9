"""A shared cache on a Redis server, beside the local one: a team compiles a model once.

``TORCHKILN_CACHE_REDIS=redis://host:6379/0`` names the server. Its entries
are other machines' work, so it is only used in shared mode with a key
(:mod:`torchkiln.cache_trust`): each value is a sealed entry, verified like
one read from disk, stored under ``torchkiln:<name>``. A server that cannot
be reached or stops answering is dropped for the rest of the process with
one warning; the local cache goes on alone.
"""

from __future__ import annotations

import os
from typing import Any

from torchkiln.cache_trust import KEY_ENV, TRUST_ENV, Trust, warn_once

REDIS_ENV = "TORCHKILN_CACHE_REDIS"
PREFIX = "torchkiln:"

_clients: dict[str, Any] = {}
_dropped: set[str] = set()


def _client(trust: Trust) -> tuple[str, Any] | None:
    url = os.environ.get(REDIS_ENV)
    if not url or url in _dropped:
        return None
    if not trust.shared:
        warn_once(
            f"torchkiln: {REDIS_ENV} is set, but entries written by other machines are only "
            f"loaded with {TRUST_ENV}=shared and {KEY_ENV}: the remote cache is not used."
        )
        _dropped.add(url)
        return None
    if url not in _clients:
        try:
            import redis
        except ImportError:
            warn_once(
                f"torchkiln: {REDIS_ENV} is set but the redis package is missing: the remote "
                "cache is not used. Fix: pip install 'torchkiln[redis]'."
            )
            _dropped.add(url)
            return None
        try:
            _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=5)
        except ValueError as e:
            _drop(url, e)
            return None
    return url, _clients[url]


def _drop(url: str, error: Exception) -> None:
    _dropped.add(url)
    warn_once(
        f"torchkiln: the remote cache {url} failed ({type(error).__name__}: {error}): "
        "using the local cache only for the rest of this process."
    )


def get(name: str, trust: Trust) -> bytes | None:
    """The sealed entry ``name`` from the server, or ``None``."""
    found = _client(trust)
    if found is None:
        return None
    url, client = found
    import redis

    try:
        return client.get(PREFIX + name)
    except (redis.RedisError, OSError) as e:  # the server went away
        _drop(url, e)
        return None


def put(name: str, data: bytes, trust: Trust) -> bool:
    """Store the sealed entry ``name`` on the server; whether it was stored."""
    found = _client(trust)
    if found is None:
        return False
    url, client = found
    import redis

    try:
        client.set(PREFIX + name, data)
    except (redis.RedisError, OSError) as e:
        _drop(url, e)
        return False
    return True
