"""Resume functions and the transformed code around a graph break."""

import zlib

import pytest
import torch

import torchkiln
from kiln_testing import source_location
from torchkiln.capture.dispatch import _caches


def resume_codes():
    """Resume code objects with cache entries (reset empties the caches of earlier tests)."""
    return [
        code
        for code, cache in _caches.items()
        if code.co_name.startswith("torchkiln_resume_in_") and cache.all_entries()
    ]


def prints_once(x):
    y = x.sin()
    print("between")
    return y.cos()


def test_resume_function_has_its_own_code_object_and_cache(backend, capsys):
    torchkiln.compile(prints_once, backend=backend)(torch.randn(2))
    (code,) = resume_codes()
    _, line = source_location(prints_once, 'print("between")')
    assert code.co_name == f"torchkiln_resume_in_prints_once_at_{line}"
    assert len(_caches[code].all_entries()) == 1


def test_resume_code_is_reused_when_the_frame_recompiles(backend, capsys):
    compiled = torchkiln.compile(prints_once, backend=backend)
    compiled(torch.randn(2))
    compiled(torch.randn(3))
    assert len(resume_codes()) == 1
    assert backend.graph_count == 4


def inner_with_break(x):
    y = x.sin()
    print("inside the callee")
    return y.cos()


def outer(x):
    return inner_with_break(x * 2) + 1


def test_break_in_an_inlined_callee_compiles_the_callee_as_its_own_frame(backend, capsys):
    x = torch.randn(3)
    out = torchkiln.compile(outer, backend=backend)(x)
    torch.testing.assert_close(out, (x * 2).sin().cos() + 1)
    assert backend.graph_count == 4  # outer prefix, callee prefix, callee rest, outer rest
    assert inner_with_break.__code__ in _caches


def test_exception_in_the_eager_part_inside_no_grad_restores_grad_mode(backend):
    def fn(x):
        with torch.no_grad():
            y = x * 2
            zlib.crc32("not bytes")
        return y

    with pytest.raises(TypeError):
        torchkiln.compile(fn, backend=backend)(torch.randn(2, requires_grad=True))
    assert torch.is_grad_enabled()


def test_exception_in_the_eager_part_reaches_the_except_clause(backend):
    def fn(x, log):
        try:
            y = x.sin()
            zlib.crc32("not bytes")
        except TypeError:
            log.append("caught")
            y = x.cos()
        return y + 1

    log = []
    x = torch.randn(2)
    torch.testing.assert_close(torchkiln.compile(fn, backend=backend)(x, log), x.cos() + 1)
    assert log == ["caught"]


def test_f_string_of_a_tensor_breaks_and_compiles_the_rest(backend):
    def fn(x):
        y = x.sin()
        text = f"{y}"  # formatting a tensor needs its value: runs natively
        return y.cos(), len(text) > 0

    x = torch.randn(2)
    out = torchkiln.compile(fn, backend=backend)(x)
    torch.testing.assert_close(out[0], x.sin().cos())
    assert out[1] is True
    assert backend.graph_count == 2


def test_unknown_instruction_runs_the_rest_uncompiled_after_the_prefix(backend):
    class Holder:
        pass

    def fn(x, holder):
        y = x.sin()

        class Local:  # LOAD_BUILD_CLASS is not traced
            pass

        holder.made = Local
        return y.cos()

    holder = Holder()
    x = torch.randn(2)
    torch.testing.assert_close(torchkiln.compile(fn, backend=backend)(x, holder), x.sin().cos())
    assert holder.made.__name__ == "Local"
    assert backend.graph_count == 1
    assert sum(torchkiln.counters["graph_break"].values()) == 1


def test_operator_on_an_opaque_value_breaks_and_compiles_the_rest(backend):
    import fractions

    def fn(x, frac):
        y = x.sin()
        half = frac / 2  # a Fraction is not traced: the division runs natively
        return y * float(half)

    x = torch.randn(2)
    out = torchkiln.compile(fn, backend=backend)(x, fractions.Fraction(1, 3))
    torch.testing.assert_close(out, x.sin() / 6)
    assert backend.graph_count == 2


def test_live_iterator_is_passed_as_the_remaining_items(backend, capsys):
    def fn(xs):
        total = 0
        for t in xs:
            total = total + t
            print("step")
        return total

    xs = [torch.randn(2) for _ in range(3)]
    torch.testing.assert_close(torchkiln.compile(fn, backend=backend)(xs), xs[0] + xs[1] + xs[2])
    assert capsys.readouterr().out == "step\n" * 3


def test_break_in_a_function_with_cells_passes_the_cell_contents(backend, capsys):
    def fn(xs, scale):
        k = scale * 2
        ys = [t * k for t in xs]  # ``k`` is a cell on 3.11 (the comprehension closes over it)
        print("between")
        return [y + k for y in ys]

    xs = [torch.randn(2) for _ in range(2)]
    out = torchkiln.compile(fn, backend=backend)(xs, 3.0)
    torch.testing.assert_close(out, [x * 6.0 + 6.0 for x in xs])
    assert backend.graph_count == 2
    assert not torchkiln.counters["eager_fallback"]
