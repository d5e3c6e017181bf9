"""What a backend's record declares (``torchkiln.plugin.Backend``): its options, modes, requirements."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from unittest import mock

import torch

import torchkiln
from torchkiln.exc import BackendUnavailable
from torchkiln.plugin import Backend
from torchkiln.testing.compare import Target, run_compared


def _fn(x, w):
    return torch.relu(x @ w) + x.sum(1, keepdim=True)


def _args(device: str):
    return lambda: (torch.randn(4, 4, device=device), torch.randn(4, 4, device=device))


def options_at_their_defaults(target: Target, record: Backend) -> None:
    """Every implemented option, passed at its default value, compiles and matches eager.

    So each key the backend declares reaches a compile function that takes it.
    """
    given = {o.name: o.default for o in record.options or () if o.implemented}
    assert given, f"backend {record.name!r} declares no options"
    run_compared(target, _fn, _args(target.device), options=given)


def mode(target: Target, name: str) -> None:
    """``compile(mode=name)`` compiles and matches eager."""
    run_compared(target, _fn, _args(target.device), mode=name)


@contextlib.contextmanager
def _hidden(module: str) -> Iterator[None]:
    """``importlib.util.find_spec`` finds no ``module``, as where it is not installed."""
    find_spec = importlib.util.find_spec
    with mock.patch.object(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == module else find_spec(name, *a),
    ):
        yield


def missing_dependency_message(record: Backend) -> None:
    """Without each required package, ``compile`` fails at once naming it and how to install it."""
    assert record.requires, f"backend {record.name!r} declares no requirements"
    for requirement in record.requires:
        with _hidden(requirement.module):
            try:
                torchkiln.compile(_fn, backend=record.name)
            except BackendUnavailable as e:
                message = str(e)
            else:
                raise AssertionError(
                    f"compile(backend={record.name!r}) without {requirement.module!r} raised nothing"
                )
        for part in (requirement.module, requirement.install_hint()):
            assert part in message, f"the message {message!r} does not name {part!r}"
