"""What a row is measured with: plain eager, torch.compile (the reference), or a torchkiln backend.

Names on the command line (``--backends``):

* ``eager``: plain PyTorch, the baseline every speedup is over;
* ``torch.compile`` or ``torch.compile:MODE``: ``torch.compile(model, mode=MODE)``
  with its default backend, inductor;
* ``kiln:NAME`` or ``kiln:NAME:MODE``, or just ``NAME[:MODE]``:
  ``torchkiln.compile(model, backend=NAME, mode=MODE)``. torchkiln's own
  ``eager`` debug backend can only be named ``kiln:eager``;
* ``openvino.torch``: OpenVINO's own ``torch.compile(model, backend="openvino")``,
  the anchor of the openvino plugin (it imports ``openvino.torch``).

Any of the compiled ones takes options after a ``?``, ``&``-separated (values read as
JSON, else as strings): ``kiln:openvino?precision=bf16&freeze_weights=true`` passes
``options={"precision": "bf16", "freeze_weights": True}``; ``openvino.torch?precision=bf16``
sets OpenVINO's ``INFERENCE_PRECISION_HINT`` (its other keys go to its ``options`` as given).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

EAGER = "eager"
TORCH_COMPILE = "torch.compile"
TORCHKILN = "torchkiln"
OPENVINO_TORCH = "openvino.torch"
CUDAGRAPH_MODE = "reduce-overhead"
#: modes that record CUDA graphs (torch.compile's and torchkiln's alike)
CUDAGRAPH_MODES = (CUDAGRAPH_MODE, "max-autotune")


@dataclass(frozen=True)
class Variant:
    """One way of running a model; ``label`` names its column in the tables."""

    label: str
    kind: str
    backend: str | None = None
    mode: str | None = None
    #: The compile call's options, as (key, value) pairs.
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def replays_cuda_graphs(self) -> bool:
        """Steps must call ``torch.compiler.cudagraph_mark_step_begin()`` first."""
        return self.mode in CUDAGRAPH_MODES

    def compile(self, fn: Callable) -> Callable:
        """The compiled ``fn`` (compilers compile lazily, on the first call)."""
        if self.kind == EAGER:
            return fn
        options = dict(self.options) or None
        if self.kind == TORCH_COMPILE:
            return torch.compile(fn, mode=self.mode, options=options)
        if self.kind == OPENVINO_TORCH:
            import openvino.torch  # noqa: F401  (registers the "openvino" torch.compile backend)

            options = dict(self.options)
            if "precision" in options:
                options["config"] = {"INFERENCE_PRECISION_HINT": options.pop("precision")}
            return torch.compile(fn, backend="openvino", options=options or None)
        import torchkiln

        return torchkiln.compile(fn, backend=self.backend, mode=self.mode, options=options)


def _options(text: str) -> tuple[tuple[str, Any], ...]:
    """``a=1&b=bf16`` as ``(("a", 1), ("b", "bf16"))``: values read as JSON, else strings."""
    pairs = []
    for item in filter(None, text.split("&")):
        key, equals, value = item.partition("=")
        if not key or not equals:
            raise ValueError(f"option {item!r} is not KEY=VALUE")
        try:
            pairs.append((key, json.loads(value)))
        except json.JSONDecodeError:
            pairs.append((key, value))
    return tuple(pairs)


def parse_variant(text: str) -> Variant:
    """A ``--backends`` entry as a Variant (see the module docstring for the forms)."""
    text, _, query = text.strip().partition("?")
    options = _options(query)
    suffix = f"?{query}" if options else ""
    name, _, mode = text.partition(":")
    if name == EAGER and not mode and not options:
        return Variant(EAGER, EAGER)
    if name == TORCH_COMPILE:
        return Variant(text + suffix, TORCH_COMPILE, "inductor", mode or None, options)
    if name == OPENVINO_TORCH and not mode:
        return Variant(text + suffix, OPENVINO_TORCH, "openvino", None, options)
    if name == "kiln":
        name, _, mode = mode.partition(":")
    if not name:
        raise ValueError(f"empty backend name in {text!r}")
    label = f"kiln:{name}" + (f":{mode}" if mode else "") + suffix
    return Variant(label, TORCHKILN, name, mode or None, options)


@dataclass(frozen=True)
class KilnBackends:
    """The torchkiln backends registered here: usable ones and why the others are not."""

    usable: tuple[str, ...]
    unusable: dict[str, str]
    cuda_graph_modes: tuple[str, ...]
    plugin_failures: dict[str, str]


def discover_kiln_backends(device: str) -> KilnBackends:
    """Ask torchkiln's registry what is registered and what can run on ``device``.

    Never raises: torchkiln is being built beside the benchmarks, so an import
    or registry failure is reported as a reason, and eager and torch.compile
    rows still run.
    """
    try:
        import torchkiln
        from torchkiln import registry

        names = torchkiln.list_backends(exclude_tags=())
    except Exception as e:
        return KilnBackends((), {"torchkiln": f"{type(e).__name__}: {e}"}, (), {})
    usable, unusable, with_cuda_graphs = [], {}, []
    for name in names:
        reason = _unusable_reason(registry, name, device)
        if reason:
            unusable[name] = reason
            continue
        usable.append(name)
        if device == "cuda" and CUDAGRAPH_MODE in getattr(
            registry.lookup_backend(name), "modes", {}
        ):
            with_cuda_graphs.append(name)
    failures = _plugin_failures(registry)
    return KilnBackends(tuple(usable), unusable, tuple(with_cuda_graphs), failures)


def _unusable_reason(registry: Any, name: str, device: str) -> str:
    try:
        record = registry.lookup_backend(name)
        status = registry.backend_status(record)
    except Exception as e:
        return f"registry lookup failed: {type(e).__name__}: {e}"
    if not status.usable:
        return status.reason
    if record.device not in (None, device) or (device != "cuda" and "gpu-only" in record.tags):
        return f"runs on {record.device or 'cuda'} only"
    return ""


def _plugin_failures(registry: Any) -> dict[str, str]:
    failures = getattr(registry, "plugin_failures", None)
    try:
        return dict(failures()) if failures else {}
    except Exception as e:
        return {"registry": f"{type(e).__name__}: {e}"}


def default_variants(device: str, kiln: KilnBackends) -> list[Variant]:
    """eager, torch.compile (and reduce-overhead on CUDA), then every usable torchkiln backend."""
    names = [EAGER, TORCH_COMPILE]
    if device == "cuda":
        names.append(f"{TORCH_COMPILE}:{CUDAGRAPH_MODE}")
    names += [f"kiln:{name}" for name in kiln.usable]
    names += [f"kiln:{name}:{CUDAGRAPH_MODE}" for name in kiln.cuda_graph_modes]
    return [parse_variant(n) for n in names]


def select_variants(spec: str, device: str, kiln: KilnBackends) -> list[Variant]:
    """``--backends``: a comma list, ``all`` standing for the defaults; eager always comes first."""
    variants: list[Variant] = []
    for item in spec.split(","):
        if not item.strip():
            continue
        chosen = default_variants(device, kiln) if item.strip() == "all" else [parse_variant(item)]
        variants += [v for v in chosen if v not in variants]
    eager = Variant(EAGER, EAGER)
    return [eager] + [v for v in variants if v != eager]
