"""Runtime configuration, read at the moment it matters (set it any time).

import torchkiln
torchkiln.config.cache_size_limit = 16

Assignments are checked: a value of the wrong type, a negative count or a
misspelled name raises at once, naming the setting.
"""

from __future__ import annotations

import difflib
import os
import sys
import types

#: Cache entries a code object may hold before new inputs run eagerly (0: never compile).
cache_size_limit: int = 8

#: When a backend raises while compiling, log it and run the frame eagerly
#: instead of raising ``BackendCompilerFailed``.
suppress_errors: bool = False

#: Raise ``RecompileLimitExceeded`` instead of falling back to eager when a
#: code object hits ``cache_size_limit``.
error_on_recompile_limit: bool = False

#: Guards check tensor strides as well as sizes (a different layout recompiles).
guard_strides: bool = True

#: The fewest ops a partition may have to go to a backend that runs only some ops
#: (``Backend.capabilities``); smaller ones go to the next backend of the chain.
partition_min_ops: int = 1

#: Split a graph captured inside a ``DistributedDataParallel`` forward at DDP's gradient
#: buckets (``bucket_cap_mb``), so all-reduces overlap the backward (``torchkiln.distributed``).
ddp_bucket_split: bool = True


def _env_flag(name: str, default: bool) -> bool:
    """A boolean from the environment: 1/0, true/false, yes/no or on/off."""
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"${name} must be 1 or 0 (true/false, yes/no, on/off), got {text!r}")


#: Keep captures on disk (under ``torchkiln.disk_cache.cache_dir()``) so that a second
#: process compiling the same code loads them instead of translating it again
#: (``torchkiln.capture.persist``). ``TORCHKILN_PERSIST_CAPTURES=0`` turns it off.
persist_captures: bool = _env_flag("TORCHKILN_PERSIST_CAPTURES", True)

#: Keep ops whose output size depends on the data (``nonzero``, ``x[mask]``, ``unique``,
#: ``masked_select``...) in the graph, their sizes unbacked SymInts, instead of breaking
#: the graph there (torch.compile's flag of the same name). Backends that take no such sizes
#: (``Backend(data_dependent_sizes=False)``: those taking static shapes only, by default)
#: still get the break.
#: ``TORCHKILN_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS=1`` turns it on.
capture_dynamic_output_shape_ops: bool = _env_flag(
    "TORCHKILN_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS", False
)

#: Check the tensors a guard function reads (dtype, device, requires_grad, sizes, strides)
#: in C++, built once per torch and Python with the system's compiler, in the background
#: on first use (``torchkiln.capture.native``); Python checks until it is ready, and where
#: it can't be built. ``TORCHKILN_NATIVE_GUARDS=0`` keeps every check in Python.
native_guards: bool = _env_flag("TORCHKILN_NATIVE_GUARDS", True)

#: Each setting's type (that of its default).
_TYPES: dict[str, type] = {name: type(globals()[name]) for name in __annotations__}


def _check(name: str, value: object) -> None:
    expected = _TYPES.get(name)
    if expected is None:
        close = difflib.get_close_matches(name, _TYPES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise AttributeError(
            f"torchkiln.config has no setting {name!r}.{hint} Settings: {', '.join(_TYPES)}"
        )
    if type(value) is not expected:  # exact: True is not an int setting, 1 not a bool one
        raise TypeError(
            f"torchkiln.config.{name} must be {expected.__name__}, "
            f"got {type(value).__name__} {value!r}"
        )
    if expected is int and value < 0:  # type: ignore[operator]
        raise ValueError(f"torchkiln.config.{name} must be >= 0, got {value}")


class _Config(types.ModuleType):
    """This module's class: assignments to settings are checked; reads are plain attribute reads."""

    def __setattr__(self, name: str, value: object) -> None:
        if not name.startswith("_"):
            _check(name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Config
