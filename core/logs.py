"""Logging: the ``torchkiln`` logger and its opt-in artifacts.

``TORCHKILN_LOGS=graph_breaks,recompiles`` (like ``TORCH_LOGS``) turns on
named artifacts, each logged at INFO under ``torchkiln.<artifact>``. The
known artifacts are listed in ``ARTIFACTS``; ``+torchkiln`` or ``all`` turns
everything on. Code asks ``enabled("guards")`` before building costly text.
"""

from __future__ import annotations

import logging
import os
import sys

ARTIFACTS = {
    "graph_breaks": "each distinct graph break once, with reason and user source line",
    "recompiles": "why a cached entry did not match: the failing guard and source line",
    "guards": "the generated guard function of every cache entry",
    "graph": "each captured torch.fx graph",
    "bytecode": "the original and the transformed code of each captured frame",
    "aot_graphs": "the joint, forward and backward graphs of the AOT-autograd layer",
    "output_code": "the code a backend generated (kernels and wrapper)",
    "aot_cache": "the on-disk plan cache: hits, stores, and why a graph was not cached",
    "capture_cache": "captures kept on disk: loads, stores, and why a capture was not kept",
    "backends": "plugin discovery: which plugins loaded, which failed and why",
    "partitions": "each graph split by backend: its partitions, which ops went where and why",
    "distributed": "each graph split at DDP's gradient buckets, or why it was not split",
    "autotune": "each candidate config a kernel's tuning measured, with its time, and the winner",
    "quiet": "no progress bars (autotuning's)",
}

log = logging.getLogger("torchkiln")
_enabled: set[str] = set()


def _parse(spec: str) -> set[str]:
    names = {part.strip() for part in spec.split(",") if part.strip()}
    if names & {"all", "+torchkiln"}:
        return set(ARTIFACTS)
    unknown = names - set(ARTIFACTS)
    if unknown:
        log.warning(
            "TORCHKILN_LOGS names unknown artifacts %s; known: %s",
            sorted(unknown),
            ", ".join(sorted(ARTIFACTS)),
        )
    return names & set(ARTIFACTS)


def set_logs(spec: str | None = None) -> None:
    """Turn artifacts on, as ``TORCHKILN_LOGS`` does (``None`` re-reads it)."""
    spec = os.environ.get("TORCHKILN_LOGS", "") if spec is None else spec
    _enabled.clear()
    _enabled.update(_parse(spec))
    if _enabled and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[torchkiln.%(artifact)s] %(message)s"))
        handler.addFilter(_default_artifact)
        log.addHandler(handler)
    if _enabled and (log.level == logging.NOTSET or log.level > logging.INFO):
        log.setLevel(logging.INFO)


def _default_artifact(record: logging.LogRecord) -> bool:
    if not hasattr(record, "artifact"):
        record.artifact = record.name.removeprefix("torchkiln").lstrip(".") or "main"
    return True


def enabled(artifact: str) -> bool:
    """Whether the artifact was asked for (cheap: call it on hot paths)."""
    return artifact in _enabled


def artifact(name: str, message: str, *args: object) -> None:
    """Log ``message % args`` under the artifact ``name`` if it is enabled."""
    if name in _enabled:
        log.info(message, *args, extra={"artifact": name})


set_logs()
