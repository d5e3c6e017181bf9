"""The option schema, modes, tracing and the plugin registration."""

import pytest
import torch
from inductor_testing import check, compile_fn

import torchkiln_inductor
from torchkiln.exc import InvalidOptionError, KilnError, NotImplementedYet
from torchkiln_inductor import plugin
from torchkiln_inductor.backend import compile_graph
from torchkiln_inductor.options import OPTIONS, parse_options


def test_list_options_names_every_declared_option():
    names = torchkiln_inductor.list_options()
    assert {
        "cpp.threads",
        "cpp.simdlen",
        "fallback_random",
        "trace.enabled",
        "trace.graph_diagram",
        "epilogue_fusion",
        "fuse_attention",
        "max_autotune",
        "shape_padding",
        "triton.cudagraphs",
        "freezing",
    } <= set(names)


def test_list_mode_options_covers_the_four_modes():
    modes = torchkiln_inductor.list_mode_options()
    assert set(modes) == {
        "default",
        "reduce-overhead",
        "max-autotune",
        "max-autotune-no-cudagraphs",
    }
    assert torchkiln_inductor.list_mode_options("max-autotune")["max_autotune"] is True


def test_plugin_declares_the_inductor_backend_with_schema_and_modes():
    (backend,) = plugin.torchkiln_backends()
    assert backend.name == "inductor"
    assert backend.options == OPTIONS
    assert set(backend.modes) == set(torchkiln_inductor.list_mode_options())


def test_unknown_option_is_rejected():
    with pytest.raises(InvalidOptionError, match="no option 'cpp.bogus'"):
        parse_options({"cpp.bogus": 1})


def test_compile_function_called_directly_checks_like_compile():
    """The core's checker, not a copy: a bool is no thread count here either."""
    with pytest.raises(InvalidOptionError, match=r"'cpp.threads' of backend 'inductor' expects"):
        compile_graph(
            torch.fx.symbolic_trace(lambda x: x + 1), [torch.randn(2)], **{"cpp.threads": True}
        )


def test_unimplemented_option_raises_not_implemented_yet():
    with pytest.raises(NotImplementedYet, match="shape_padding"):
        parse_options({"shape_padding": True})


def test_cpp_threads_sets_the_openmp_thread_count():
    compiled = check(lambda x: x.exp() + 1, torch.randn(256, 256), **{"cpp.threads": 1})
    assert "num_threads(1)" in compiled.artifact.cpp_source


def test_cpp_simdlen_sets_the_reduction_lanes():
    compiled = check(lambda x: x.sum(-1), torch.randn(16, 100), **{"cpp.simdlen": 4})
    assert "[4]" in compiled.artifact.cpp_source


def test_epilogue_fusion_off_keeps_reduction_consumers_apart():
    fn = lambda x: x / x.sum(-1, keepdim=True)  # noqa: E731
    x = torch.rand(8, 64) + 0.5
    fused = check(fn, x)
    unfused = check(fn, x, epilogue_fusion=False)
    assert fused.num_kernels == 1 and unfused.num_kernels == 2


def test_trace_enabled_writes_graphs_ir_and_code(tmp_path):
    check(
        lambda x: x.sin().sum(0),
        torch.randn(8, 8),
        **{"trace.enabled": True, "trace.dir": str(tmp_path)},
    )
    (folder,) = tmp_path.iterdir()
    names = {p.name for p in folder.iterdir()}
    assert {
        "fx_graph_before_passes.py",
        "fx_graph_after_passes.py",
        "ir_before_fusion.txt",
        "schedule_before_fusion.txt",
        "schedule_after_fusion.txt",
        "output_code.py",
    } <= names


def test_graph_diagram_without_pydot_names_the_package(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pydot(name, *args, **kwargs):
        if name == "pydot":
            raise ImportError("no pydot")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pydot)
    with pytest.raises(KilnError, match="pip install pydot"):
        compile_fn(
            lambda x: x + 1,
            torch.randn(4),
            **{"trace.enabled": True, "trace.graph_diagram": True, "trace.dir": str(tmp_path)},
        )


def test_output_code_log_lists_fallbacks(caplog):
    from torchkiln import logs

    logs.set_logs("output_code")
    try:
        with caplog.at_level("INFO", logger="torchkiln"):
            compile_fn(lambda x: torch.cumsum(x, 0) + 1, torch.randn(5))
    finally:
        logs.set_logs("")
    text = caplog.text
    assert "fallbacks to aten (1)" in text and "aten.cumsum.default: no lowering" in text
    assert 'extern "C" void kiln_' in text


def test_devices_without_a_generator_raise_not_implemented_yet():
    meta = torch.empty(2, device="meta")
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(NotImplementedYet, match="CPU and CUDA tensors only; got a meta tensor"):
        compile_graph(gm, [meta])
