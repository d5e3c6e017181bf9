"""The backend registry: discovery, listing, registration, failures."""

from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln import registry
from torchkiln.exc import BackendUnavailable, KilnError, UnknownBackendError
from torchkiln.plugin import Backend, Requirement, hookimpl


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test disappear after it."""
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    return registry._registry


def noop_backend(gm, example_inputs):
    return gm.forward


def test_default_list_has_the_bundled_backends():
    assert {"cudagraphs", "inductor", "onnxrt", "openvino"} <= set(torchkiln.list_backends())
    assert "tvm" in torchkiln.list_backends(experimental=True)  # tagged experimental


def test_default_list_hides_debug_backends():
    assert "eager" not in torchkiln.list_backends()


def test_experimental_list_adds_debug_backends():
    names = torchkiln.list_backends(experimental=True)
    assert {"eager", "aot_eager", "aot_eager_decomp_partition"} <= set(names)
    assert names == sorted(names)


def test_empty_exclude_tags_lists_everything():
    assert torchkiln.list_backends(exclude_tags=()) == torchkiln.list_backends(experimental=True)


def test_exclude_tags_filters_by_tag(scratch_registry):
    torchkiln.register_backend(noop_backend, name="tagged_one", tags=("special",))
    assert "tagged_one" in torchkiln.list_backends(exclude_tags=())
    assert "tagged_one" not in torchkiln.list_backends(exclude_tags=("special",))


def test_register_backend_as_bare_decorator(scratch_registry):
    @torchkiln.register_backend
    def my_bare_backend(gm, example_inputs):
        """Runs graphs unchanged."""
        return gm.forward

    backend = registry.lookup_backend("my_bare_backend")
    assert backend.compile_fn is my_bare_backend
    assert backend.description == "Runs graphs unchanged."


def test_register_backend_as_decorator_with_arguments(scratch_registry):
    @torchkiln.register_backend(name="named_backend", tags=("experimental",))
    def whatever(gm, example_inputs):
        return gm.forward

    assert registry.lookup_backend("named_backend").tags == ("experimental",)
    assert "named_backend" in torchkiln.list_backends(experimental=True)
    assert "named_backend" not in torchkiln.list_backends()


def test_register_backend_as_call(scratch_registry):
    returned = torchkiln.register_backend(noop_backend, name="called_backend")
    assert returned is noop_backend
    assert registry.lookup_backend("called_backend").compile_fn is noop_backend


def test_register_backend_with_its_arguments_swapped_says_so(scratch_registry):
    before = dict(scratch_registry._backends)
    with pytest.raises(TypeError, match=r"must be callable.*name goes second"):
        torchkiln.register_backend("swapped", noop_backend)
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        torchkiln.register_backend(noop_backend, name=noop_backend)
    assert scratch_registry._backends == before
    assert "swapped" not in torchkiln.list_backends(exclude_tags=())


def test_register_backend_record(scratch_registry):
    torchkiln.register_backend(Backend("record_backend", noop_backend, tags=("debug",)))
    assert registry.lookup_backend("record_backend").tags == ("debug",)


def test_registering_a_taken_name_is_an_error(scratch_registry):
    with pytest.raises(KilnError, match="already registered.*override=True"):
        torchkiln.register_backend(noop_backend, name="eager")


def test_override_replaces_a_taken_name(scratch_registry):
    torchkiln.register_backend(noop_backend, name="eager", override=True)
    assert registry.lookup_backend("eager").compile_fn is noop_backend


def test_unknown_name_lists_backends_and_closest_match():
    with pytest.raises(UnknownBackendError) as info:
        registry.lookup_backend("eagr")
    message = str(info.value)
    assert "Did you mean 'eager'?" in message
    assert "onnxrt" in message and "inductor" in message


def test_failing_plugin_is_recorded_and_others_still_load():
    fresh = registry.BackendRegistry(
        builtin_plugins=("torchkiln_no_such_plugin_module", "torchkiln.backends.debug"),
        entry_point_groups=("torchkiln.no_such_group", "torchkiln.no_such_group_either"),
    )
    assert fresh.names(exclude_tags=()) == ["eager"]
    (failure,) = fresh.failures().values()
    assert "No module named 'torchkiln_no_such_plugin_module'" in failure


class RaisingPlugin:
    @hookimpl
    def torchkiln_backends(self):
        raise RuntimeError("plugin exploded")


def test_plugin_whose_hook_raises_is_recorded(monkeypatch):
    fresh = registry.BackendRegistry(
        builtin_plugins=("torchkiln.backends.debug",),
        entry_point_groups=("torchkiln.no_such_group", "torchkiln.no_such_group_either"),
    )
    fresh._discover()
    fresh._register_plugin("raising", RaisingPlugin)
    assert "RuntimeError: plugin exploded" in fresh.failures()["raising"]
    assert fresh.names(exclude_tags=()) == ["eager"]


def test_cli_table_shows_usability_and_extra(capsys, scratch_registry):
    torchkiln.register_backend(
        Backend(
            "needs_missing_pkg",
            noop_backend,
            description="needs a package that is not installed",
            requires=(Requirement("torchkiln_missing_pkg", extra="missingextra"),),
        )
    )
    from torchkiln.__main__ import main

    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("needs_missing_pkg"))
    assert "pip install 'torchkiln[missingextra]'" in row
    eager_row = next(line for line in out.splitlines() if line.startswith("eager "))
    assert "debug" in eager_row and "yes" in eager_row


def test_missing_package_makes_backend_unavailable(scratch_registry):
    torchkiln.register_backend(
        Backend("needs_pkg", noop_backend, requires=(Requirement("torchkiln_missing_pkg", "kx"),))
    )
    with pytest.raises(BackendUnavailable, match=r"torchkiln_missing_pkg.*torchkiln\[kx\]"):
        torchkiln.compile(lambda x: x, backend="needs_pkg")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a CUDA GPU")
def test_gpu_backend_without_gpu_is_unavailable(scratch_registry):
    torchkiln.register_backend(Backend("needs_gpu", noop_backend, device="cuda"))
    with pytest.raises(BackendUnavailable, match="needs a CUDA GPU"):
        torchkiln.compile(lambda x: x, backend="needs_gpu")
