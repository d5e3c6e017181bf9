"""Runtime configuration, read at the moment it matters (set it any time).

import torchkiln
torchkiln.config.cache_size_limit = 16
"""

from __future__ import annotations

import os

#: Cache entries a code object may hold before new inputs run eagerly.
cache_size_limit: int = 8

#: When a backend raises while compiling, log it and run the frame eagerly
#: instead of raising ``BackendCompilerFailed``.
suppress_errors: bool = False

#: Raise ``RecompileLimitExceeded`` instead of falling back to eager when a
#: code object hits ``cache_size_limit``.
error_on_recompile_limit: bool = False

#: Guards check tensor strides as well as sizes (a different layout recompiles).
guard_strides: bool = True

#: Keep captures on disk (under ``torchkiln.disk_cache.cache_dir()``) so that a second
#: process compiling the same code loads them instead of translating it again
#: (``torchkiln.capture.persist``). ``TORCHKILN_PERSIST_CAPTURES=0`` turns it off.
persist_captures: bool = os.environ.get("TORCHKILN_PERSIST_CAPTURES", "1") != "0"
