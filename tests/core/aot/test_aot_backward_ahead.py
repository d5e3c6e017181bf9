"""``aot_autograd(backward_ahead=True)``: the backward compiled with the forward, for the
saved values' layouts the forward's staged compiler announces, and used by the first
backward only where the saved values really have them."""

from __future__ import annotations

import torch
import torch.fx as fx

import torchkiln
from torchkiln import counters
from torchkiln.aot import aot_autograd, simple_partition
from torchkiln.aot.runtime import layouts_of


def _column_major(t):
    """``t`` (2-d) laid out column by column: a dense layout that is not the traced one."""
    return t.t().contiguous().t() if isinstance(t, torch.Tensor) and t.dim() == 2 else t


class StagedCompiler:
    """Runs graphs as they are; ``start`` announces the outputs' strides first. The forward
    (``relayout``) returns its 2-d saved values column-major; ``announce_relayout`` says
    so, or (False) announces the traced strides while still relaying them out: a compiler
    that got its own layouts wrong."""

    def __init__(self, relayout: bool = False, announce_relayout: bool = True):
        self.relayout = relayout
        self.announce_relayout = announce_relayout
        #: (how, the example inputs' layouts) per compile: how is "call" or "start"
        self.compiles: list[tuple[str, list]] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list):
        self.compiles.append(("call", layouts_of(example_inputs)))
        return self._compiled(gm)

    def start(self, gm: fx.GraphModule, example_inputs: list):
        self.compiles.append(("start", layouts_of(example_inputs)))
        compiled = self._compiled(gm)
        outputs = gm.graph.output_node().args[0]
        first_saved = gm.meta.get("num_user_outputs", len(outputs))
        strides = []
        for k, node in enumerate(outputs):
            value = node.meta.get("val") if isinstance(node, fx.Node) else None
            if not isinstance(value, torch.Tensor):
                strides.append(None)
                continue
            if self.announce_relayout and self.relayout and k >= first_saved:
                value = _column_major(value)
            strides.append(value.stride())

        class Started:
            output_strides = strides

            @staticmethod
            def finish():
                return compiled

        return Started()

    def _compiled(self, gm: fx.GraphModule):
        first_saved = gm.meta.get("num_user_outputs")
        if not self.relayout or first_saved is None:  # the backward, or no relayout
            return gm.forward

        def forward(*args):
            outs = gm.forward(*args)
            return (*outs[:first_saved], *(_column_major(t) for t in outs[first_saved:]))

        return forward


def _train_step(backend) -> tuple[list, list]:
    """Gradients of a two-layer step through ``backend`` and eagerly, on fresh inputs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    x = torch.randn(4, 6)
    torchkiln.compile(model, backend=backend)(x).square().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    return got, [p.grad for p in model.parameters()]


def _backend(compiler: StagedCompiler, ahead: bool = True):
    def backend(gm, example_inputs):
        return aot_autograd(
            fw_compiler=compiler,
            bw_compiler=compiler,
            partition_fn=simple_partition,
            backward_ahead=ahead,
        )(gm, example_inputs)

    return backend


def test_the_backward_compiles_with_the_forward_for_the_announced_layouts() -> None:
    compiler = StagedCompiler(relayout=True)
    counters.clear()
    got, want = _train_step(_backend(compiler))
    torch.testing.assert_close(got, want)
    assert [how for how, _ in compiler.compiles] == ["start", "start"]  # none at backward
    backward_layouts = compiler.compiles[1][1]
    assert any(lay is not None and lay[1] == (1, lay[0][0]) for lay in backward_layouts), (
        "the backward was compiled for column-major saved values"
    )
    assert counters["aot"]["backward_ahead_missed"] == 0


def test_a_backward_compiled_for_layouts_the_forward_did_not_give_is_compiled_again() -> None:
    compiler = StagedCompiler(relayout=True, announce_relayout=False)
    counters.clear()
    got, want = _train_step(_backend(compiler))
    torch.testing.assert_close(got, want)
    assert [how for how, _ in compiler.compiles] == ["start", "start", "call"]
    assert compiler.compiles[1][1] != compiler.compiles[2][1]
    assert counters["aot"]["backward_ahead_missed"] == 1


def test_without_backward_ahead_the_backward_compiles_at_the_first_backward() -> None:
    compiler = StagedCompiler(relayout=True)
    got, want = _train_step(_backend(compiler, ahead=False))
    torch.testing.assert_close(got, want)
    assert [how for how, _ in compiler.compiles] == ["call", "call"]


def test_a_backward_that_fails_ahead_is_compiled_again_at_the_first_backward() -> None:
    compiler = StagedCompiler()
    starts = compiler.start

    def start(gm, example_inputs):
        if gm.meta.get("num_user_outputs") is None:  # the backward
            raise RuntimeError("not today")
        return starts(gm, example_inputs)

    compiler.start = start
    got, want = _train_step(_backend(compiler))
    torch.testing.assert_close(got, want)
    assert [how for how, _ in compiler.compiles] == ["start", "call"]
