"""What makes openvino training steps cheap, each against eager: layer norm statistics,
outputs that repeat one another, booleans, buffers written again, graphs left to torch,
channels-last outputs, eltwise kernels."""

from __future__ import annotations

import copy
import pickle

import pytest

pytest.importorskip("openvino", reason="openvino is not installed")

import openvino as ov
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from tests.plugins.openvino.ov_checks import train_compared
from torchkiln_openvino import cache, compiler
from torchkiln_openvino.compiler import channels_last, compile_aten_graph, convert, core
from torchkiln_openvino.decompositions import batch_norm_training
from torchkiln_openvino.runtime import OpenVINOGraph, nhwc_inputs

aten = torch.ops.aten
F32 = {"rtol": 1e-4, "atol": 1e-4}


def ln_mlp():
    return nn.Sequential(
        nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32), nn.LayerNorm(32)
    )


def test_layer_norms_of_a_training_graph_run_in_openvino_with_their_statistics(caplog):
    """Their mean and rstd, saved for the backward, no longer send them to the next backend."""
    torch.manual_seed(0)
    train_compared(ln_mlp(), torch.randn(4, 16), caplog)
    assert "forward graph: 1 partition (openvino: 1)" in caplog.text


def test_training_steps_match_eager():
    """Several steps: weights returned as they are, output buffers written again. (SGD:
    Adam's first steps turn gradients of 1e-8 into updates of lr, either sign.)"""
    torch.manual_seed(0)
    model = ln_mlp()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino")
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin)]
    for _ in range(4):
        x = torch.randn(4, 16)
        for forward, optimizer in zip((compiled, twin), optimizers):
            optimizer.zero_grad()
            forward(x).square().mean().backward()
            optimizer.step()
        torch.testing.assert_close(list(model.parameters()), list(twin.parameters()), **F32)


def norm_net() -> nn.Module:
    """The guard fuzz's NormNet: a linear layer, a batch norm and a layer norm."""
    return nn.Sequential(nn.Linear(3, 6, bias=False), nn.BatchNorm1d(6), nn.LayerNorm(6))


def assert_autocast_gradients_as_close_as_eagers(model: nn.Module, options: dict) -> nn.Module:
    """Under float16 CPU autocast, ``model`` compiled for openvino with ``options`` and an
    eager twin give gradients of float64's, input's and parameters'; OpenVINO's float16
    rounding differs from torch's, so its error must be of the size of eager's own. Returns
    the twin."""
    twin, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    compiled = torchkiln.compile(model, backend="openvino", options=options)
    # weighted: a sum of squares of a layer norm's output is constant, its gradients noise
    x, weights = torch.randn(8, 3), torch.randn(8, 6)

    def gradients(forward, autocast: bool) -> list[torch.Tensor]:
        dtype = next(forward.parameters()).dtype
        inputs = x.to(dtype).requires_grad_()
        with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
            out = forward(inputs)
        (out.to(dtype) * weights.to(dtype)).sum().backward()
        return [g.double() for g in (inputs.grad, *(p.grad for p in forward.parameters()))]

    truth = gradients(exact, autocast=False)
    for name, kiln, eager, true in zip(
        ("input", "linear", "bn weight", "bn bias", "ln weight", "ln bias"),
        gradients(compiled, autocast=True),
        gradients(twin, autocast=True),
        truth,
        strict=True,
    ):
        kiln_error, eager_error = (kiln - true).abs().max(), (eager - true).abs().max()
        assert kiln_error <= 3 * eager_error + 1e-4, (name, float(kiln_error), float(eager_error))
    return twin


def test_statistics_torch_computes_in_another_dtype_than_its_meta_are_taken():
    """The guard fuzz's finding: under float16 autocast torch's CPU layer norm of float16
    activations with float32 weights gives float32 mean and rstd, its meta float16; the
    backward model, compiled for float16 inputs, refused them (OpenVINO ParameterMismatch)."""
    torch.manual_seed(0)
    # OpenVINO for every graph: the faster of it and torch, timed, would make the numbers
    # depend on the host's load
    assert_autocast_gradients_as_close_as_eagers(norm_net().eval(), {"torch_when_faster": False})


@pytest.mark.parametrize("backward_bn_in_torch", [False, True])
def test_a_training_batch_norm_under_float16_autocast_saves_torchs_statistics(
    backward_bn_in_torch,
):
    """The guard fuzz's finding: under float16 autocast a training batch norm of float16
    activations with float32 parameters saves float32 statistics in torch's CPU kernel (its
    meta says float16), and torch's backward kernel takes no others ("mixed dtype (CPU):
    expect parameter to have scalar type of Float"); OpenVINO gave them in float16 where
    the backward ran in torch (left to it, or timed faster there). The batch norm now runs
    in torch."""
    torch.manual_seed(0)
    model = norm_net()
    disabled = ["aten.native_batch_norm_backward"] if backward_bn_in_torch else []
    options = {"torch_when_faster": False, "disabled_ops": disabled}
    twin = assert_autocast_gradients_as_close_as_eagers(model, options)
    torch.testing.assert_close(model[1].running_mean, twin[1].running_mean, rtol=1e-3, atol=1e-3)


def test_an_output_returned_twice_comes_back_as_an_alias():
    """The frontend fails on a graph returning one value twice (a softmax saved through an
    alias): it converts it once, and the runtime aliases the repeat."""

    def fn(x):
        s = aten._softmax.default(x, -1, False)
        return s, aten.alias.default(aten.alias.default(s)), aten.mul.Tensor(s, 2), s

    x = torch.randn(4, 8)
    compiled = compile_aten_graph(make_fx(fn)(x), [x])
    for _ in range(2):
        x = torch.randn(4, 8)
        out = compiled(x)
        torch.testing.assert_close(out, list(fn(x)), **F32)
        assert out[1].data_ptr() == out[3].data_ptr() == out[0].data_ptr()


def test_an_input_returned_as_it_is_is_that_input():
    """A training graph's forward returns the weights it saves for the backward: the model
    does not (OpenVINO would copy each into an output buffer)."""
    x = torch.randn(4, 3)
    compiled = compile_aten_graph(make_fx(lambda x: (x, aten.mul.Tensor(x, 2), x))(x), [x])
    assert len(compiled.compiled.outputs) == 1
    for _ in range(2):
        x = torch.randn(4, 3)
        same, double, again = compiled(x)
        assert same is x and again is x
        torch.testing.assert_close(double, x * 2, rtol=0, atol=0)


def test_saved_values_stay_in_openvinos_layout():
    """A training forward's outputs past ``meta["num_user_outputs"]`` are saved for the
    backward, which takes any strides: a transposed one stays contiguous, where a user's
    output gets eager's strides."""

    def fn(x):
        return aten.t.default(aten.mul.Tensor(x, 2)), aten.t.default(aten.mul.Tensor(x, 3))

    x = torch.randn(4, 3)
    gm = make_fx(fn)(x)
    gm.meta["num_user_outputs"] = 1
    user, saved = compile_aten_graph(gm, [x])(x)
    assert user.stride() == (1, 3) and saved.is_contiguous()
    torch.testing.assert_close([user, saved], list(fn(x)), rtol=0, atol=0)


def test_booleans_go_in_and_out_as_bytes():
    def fn(x, mask):
        return aten.le.Scalar(x, 0), aten.where.self(mask, aten.scalar_tensor.default(0.0), x)

    x, mask = torch.randn(4, 8), torch.randn(4, 8) > 0
    graph = compile_aten_graph(make_fx(fn)(x, mask), [x, mask])
    assert [p.get_element_type() for p in graph.compiled.inputs] == [ov.Type.f32, ov.Type.u8]
    assert graph.compiled.outputs[0].get_element_type() == ov.Type.u8
    for _ in range(2):
        x, mask = torch.randn(4, 8), torch.randn(4, 8) > 0
        out = graph(x, mask)
        assert out[0].dtype == torch.bool
        torch.testing.assert_close(out, list(fn(x, mask)), rtol=0, atol=0)


def test_output_buffers_are_written_again_only_when_nothing_holds_them():
    x = torch.randn(4, 3)
    compiled = compile_aten_graph(make_fx(lambda x: (aten.mul.Tensor(x, 2),))(x), [x])
    address = compiled(x)[0].data_ptr()
    assert compiled(x)[0].data_ptr() == address  # the last result was dropped
    held = compiled(x)[0]
    view = compiled(torch.ones(4, 3))[0][1:]
    storage = compiled(torch.zeros(4, 3))[0].untyped_storage()
    array = compiled(torch.full((4, 3), 3.0))[0].numpy()
    compiled(torch.full((4, 3), 5.0))
    torch.testing.assert_close(held, x * 2, rtol=0, atol=0)
    assert (view == 2).all() and (array == 6).all()
    assert torch.tensor([], dtype=torch.float32).set_(storage).eq(0).all()


@pytest.mark.parametrize(
    "fn, inputs",
    [
        (lambda x: (aten.alias.default(aten.alias.default(x)), aten.t.default(x)), [(4, 3)]),
        (lambda n: (aten.add.Tensor(n, 1),), []),  # a batch norm's num_batches_tracked + 1
        (lambda x: ((aten.mul.Tensor(x, 2), x)[1],), [(4, 3)]),  # the model would give nothing
    ],
    ids=["views", "integer-scalars", "inputs-alone"],
)
def test_graphs_an_openvino_call_would_only_slow_run_in_torch(fn, inputs):
    args = [torch.randn(s) for s in inputs] or [torch.tensor(3)]
    gm = make_fx(fn)(*args)
    compiled = compile_aten_graph(gm, args)
    assert compiled is gm
    restored = cache.load(pickle.loads(pickle.dumps(cache.dump(compiled))))
    torch.testing.assert_close(list(restored(*args)), list(fn(*args)), rtol=0, atol=0)


def test_channels_last_outputs_come_back_in_eagers_layout():
    """Outputs OpenVINO keeps NHWC (a convolution's) are given NHWC and copied by torch,
    where OpenVINO's reference reorder to NCHW is slow."""

    def fn(x, w):
        y = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return y, aten.relu.default(y), aten.sum.dim_IntList(y, [0, 2, 3])

    x, w = torch.randn(2, 16, 8, 8), torch.randn(16, 16, 3, 3)
    gm = make_fx(fn)(x, w)
    model = channels_last(convert(gm, [x, w]), frozenset({0, 1}))
    compiled = core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    graph = OpenVINOGraph(compiled, gm, frozenset({0, 1}))
    for _ in range(2):
        x = torch.randn(2, 16, 8, 8)
        out = graph(x, w)
        torch.testing.assert_close(out, list(fn(x, w)), **F32)
        assert all(t.is_contiguous() for t in out)


def test_saved_channels_last_outputs_stay_nhwc():
    """A training forward's saved value that OpenVINO gives NHWC is handed out as it lies
    (an NCHW view of channels-last strides, no copy); a user's output gets eager's strides."""

    def fn(x, w):
        y = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return aten.relu.default(y), y

    x, w = torch.randn(2, 16, 8, 8), torch.randn(16, 16, 3, 3)
    gm = make_fx(fn)(x, w)
    gm.meta["num_user_outputs"] = 1
    model = channels_last(convert(gm, [x, w]), frozenset({0, 1}))
    compiled = core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    graph = OpenVINOGraph(compiled, gm, frozenset({0, 1}))
    for _ in range(2):
        x = torch.randn(2, 16, 8, 8)
        user, saved = graph(x, w)
        torch.testing.assert_close([user, saved], list(fn(x, w)), **F32)
        assert user.is_contiguous()
        assert saved.is_contiguous(memory_format=torch.channels_last) and not saved.is_contiguous()


@pytest.mark.parametrize("given", ["channels-last", "contiguous"])
def test_an_input_compiled_channels_last_is_taken_nhwc(given):
    """An input compiled channels-last (a saved value of a forward) is bound NHWC as it
    lies; one that comes otherwise laid out is copied into that order first."""

    def fn(x, g):
        return (aten.mul.Tensor(aten.relu.default(x), g),)

    def laid_out(t):
        return t.contiguous(memory_format=torch.channels_last) if given == "channels-last" else t

    example = torch.randn(2, 16, 8, 8).contiguous(memory_format=torch.channels_last)
    g = torch.randn(2, 16, 8, 8)
    graph = compile_aten_graph(make_fx(fn)(example, g), [example, g])
    assert graph.nhwc_inputs == {0}
    assert list(graph.compiled.inputs[0].get_shape()) == [2, 8, 8, 16]
    for _ in range(2):
        x, g = laid_out(torch.randn(2, 16, 8, 8)), torch.randn(2, 16, 8, 8)
        torch.testing.assert_close(graph(x, g), list(fn(x, g)), rtol=0, atol=0)


def test_a_conv_net_trains_with_its_saved_values_nhwc(caplog, monkeypatch, tmp_path):
    """A CNN's training step: the forward saves its convolutions' outputs NHWC, the
    backward takes them so; loss and gradients match eager's. Every graph in OpenVINO: on
    a loaded machine the measured choice (``torch_when_faster``) may keep torch's forward."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))  # compiled here, not loaded
    found: list[frozenset[int]] = []

    def recording(example_inputs):
        found.append(nhwc_inputs(example_inputs))
        return found[-1]

    monkeypatch.setattr(compiler, "nhwc_inputs", recording)
    model = nn.Sequential(conv_bn(), nn.ReLU(), nn.Conv2d(4, 16, 3, padding=1), nn.BatchNorm2d(16))
    train_compared(model, torch.randn(4, 3, 16, 16), caplog, {"torch_when_faster": False})
    assert not found[0] and found[1], "the backward took no saved value NHWC"


def conv_bn(affine: bool = True):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8, affine=affine),
        nn.ReLU(),
        nn.Conv2d(8, 4, 1),
    )


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
@pytest.mark.parametrize("offset", [0.0, 20.0], ids=["centred", "offset"])
def test_training_batch_norm_matches_eager(affine, offset):
    """Written as a per-channel scale and shift: outputs, gradients and running statistics
    as eager's, also where the mean is large against the deviation."""
    torch.manual_seed(0)
    model = conv_bn(affine)
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino")
    for _ in range(2):
        x = torch.randn(4, 3, 8, 8) + offset
        y, expected = compiled(x), twin(x)
        torch.testing.assert_close(y, expected, **F32)
        y.square().mean().backward()
        expected.square().mean().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **F32)
    torch.testing.assert_close(list(model.buffers()), list(twin.buffers()), **F32)


def test_training_batch_norm_is_one_scale_and_shift():
    """No op of the decomposed norm multiplies the whole tensor by the deviation apart."""
    x, w, b = torch.randn(2, 4, 3, 3), torch.randn(4), torch.randn(4)
    mean, var = torch.zeros(4), torch.ones(4)
    gm = make_fx(lambda *args: batch_norm_training(*args, True, 0.1, 1e-5))(x, w, b, mean, var)
    full = [
        n.target
        for n in gm.graph.nodes
        if n.op == "call_function"
        and isinstance(n.meta.get("val"), torch.Tensor)
        and n.meta["val"].shape == x.shape
    ]
    assert full == [aten.mul.Tensor, aten.add.Tensor]
    expected = aten._native_batch_norm_legit_functional.default(x, w, b, mean, var, True, 0.1, 1e-5)
    torch.testing.assert_close(list(gm(x, w, b, mean, var)), list(expected), **F32)


def test_graphs_without_convolutions_run_eltwise_kernels_not_snippets():
    """OpenVINO's eltwise kernels cost less than its snippets subgraphs but around
    convolutions, where they run planar behind slow reorders."""

    def layer_types(fn, *args):
        graph = compile_aten_graph(make_fx(fn)(*args), list(args))
        ops = graph.compiled.get_runtime_model().get_ordered_ops()
        return {op.get_rt_info()["layerType"].astype(str) for op in ops}

    x = torch.randn(8, 64)
    pointwise = layer_types(lambda x: aten.gelu.default(aten.mul.Tensor(x, x)), x)
    assert "Subgraph" not in pointwise and "Eltwise" in pointwise
    x, w = torch.randn(2, 16, 8, 8), torch.randn(16, 16, 3, 3)

    def conv_gelu(x, w):
        y = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return aten.gelu.default(aten.mul.Tensor(y, y))

    assert "Subgraph" in layer_types(conv_gelu, x, w)


def test_a_graph_that_reads_some_of_its_inputs_takes_the_others():
    """OpenVINO's frontend drops unread inputs (``x.data = y * 2; return x + 1`` reads y
    only): the model takes the read ones, also when loaded from the plan cache."""

    def reads_y(x, y):
        return (aten.mul.Tensor(y, 2), aten.add.Tensor(y, 1))

    def reads_x(x, y):
        return (aten.mul.Tensor(x, 2),)

    for fn in (reads_y, reads_x):
        x, y = torch.randn(3), torch.randn(4)
        graph = compile_aten_graph(make_fx(fn)(x, y), [x, y])
        assert isinstance(graph, OpenVINOGraph)
        restored = cache.load(pickle.loads(pickle.dumps(cache.dump(graph))))
        for compiled in (graph, restored):
            x, y = torch.randn(3), torch.randn(4)
            torch.testing.assert_close(compiled(x, y), list(fn(x, y)), rtol=0, atol=0)
