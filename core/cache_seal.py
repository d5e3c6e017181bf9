"""The layout of one cache entry: a header that proves its payload is whole and whose it is.

An entry is ``MAGIC``, one JSON line (the writer's torchkiln version, the
payload's size and SHA-256, and with a key an HMAC-SHA256 over the entry's
name and those fields), then the payload. A reader checks all of it before
the payload is unpickled or loaded, so a truncated, zero-filled or replaced
entry is rebuilt instead of crashing the process, and with a key an entry
someone without it wrote (or moved from another name) is not loaded.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from importlib import metadata

MAGIC = b"torchkiln-cache-entry 1\n"


class Damaged(Exception):
    """Not a whole entry of this format and version: rebuild it."""


class Unsigned(Exception):
    """A whole entry that does not carry a valid signature made with the configured key."""


@functools.cache
def version() -> str:
    try:
        return metadata.version("torchkiln")
    except metadata.PackageNotFoundError:
        return "unknown"


def _mac(key: bytes, name: str, size: int, digest: str) -> str:
    message = "\0".join((name, version(), str(size), digest)).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def seal(name: str, payload: bytes, key: bytes | None) -> bytes:
    """The entry ``name`` (its path under the cache root) holding ``payload``, signed with ``key``."""
    digest = hashlib.sha256(payload).hexdigest()
    header = {"version": version(), "size": len(payload), "sha256": digest}
    if key is not None:
        header["hmac"] = _mac(key, name, len(payload), digest)
    return MAGIC + json.dumps(header).encode() + b"\n" + payload


def unseal(name: str, data: bytes, key: bytes | None) -> bytes:
    """The payload of a sealed entry; raises ``Damaged`` or ``Unsigned``."""
    if not data.startswith(MAGIC):
        raise Damaged("not a torchkiln cache entry")
    line, sep, payload = data[len(MAGIC) :].partition(b"\n")
    try:
        header = json.loads(line) if sep else None
        size, digest, writer = header["size"], header["sha256"], header["version"]
    except (ValueError, TypeError, KeyError) as e:
        raise Damaged("unreadable header") from e
    if writer != version():
        raise Damaged(f"written by torchkiln {writer}, this is {version()}")
    if len(payload) != size:
        raise Damaged(f"{len(payload)} bytes instead of {size}")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise Damaged("checksum mismatch")
    if key is not None:
        signature = header.get("hmac")
        if not isinstance(signature, str) or not hmac.compare_digest(
            signature, _mac(key, name, size, digest)
        ):
            raise Unsigned("not signed with this key")
    return payload
