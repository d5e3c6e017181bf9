"""A progress bar for tuning runs long enough to wonder about (tqdm, on stderr).

The bar appears once a kernel's tuning has run :data:`DELAY_S` seconds, names the kernel and
shows the time left (tqdm's estimate, from the candidates measured so far). It stays off
when stderr is not a terminal (logs, CI) and with ``TORCHKILN_LOGS=quiet``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator

from torchkiln import logs

#: seconds of tuning before the bar shows
DELAY_S = 2.0


class _NoBar:
    """What a run without a bar updates."""

    def update(self, n: int = 1) -> None:
        pass


def bar_wanted() -> bool:
    return sys.stderr.isatty() and not logs.enabled("quiet")


@contextlib.contextmanager
def progress(kernel: str, total: int) -> Iterator:
    """A bar over ``total`` candidates of ``kernel`` (``update()`` after each), or a stand-in
    when the bar is off."""
    if not bar_wanted():
        yield _NoBar()
        return
    try:
        from tqdm import tqdm
    except ImportError:
        _no_tqdm()
        yield _NoBar()
        return
    with tqdm(
        total=total,
        desc=f"autotune {kernel}",
        unit="config",
        file=sys.stderr,
        delay=DELAY_S,
        leave=False,
    ) as bar:
        yield bar


@functools.cache
def _no_tqdm() -> None:
    logs.log.warning("autotuning shows no progress bar without tqdm: pip install tqdm")
