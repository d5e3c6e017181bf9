"""Index expressions simplify views back into plain strided indices."""

from torchkiln_inductor.indexing import Expr, Var, linear_index, unflatten


def v(name, size):
    return Expr.of(Var(name, size))


def test_flatten_then_unflatten_is_the_identity():
    i, j = v("i", 4), v("j", 6)
    flat = linear_index([i, j], [6, 1])
    assert unflatten(flat, (4, 6)) == [i, j]


def test_split_then_merge_recombines_into_the_flat_index():
    n = v("n", 24)
    a, b = unflatten(n, (4, 6))
    assert a * 6 + b == n


def test_floordiv_drops_terms_below_the_divisor():
    i, j = v("i", 10), v("j", 8)
    assert (i * 8 + j).floordiv(8) == i
    assert (i * 8 + j).mod(8) == j


def test_division_by_a_multiple_of_a_coefficient_factors_out_the_small_terms():
    """Merged loops index ``(128*o0 + o1) // 8192`` with ``o1 < 128``: that is ``o0 // 64``."""
    o0, o1 = v("o0", 256), v("o1", 128)
    flat = o0 * 128 + o1
    assert flat.floordiv(8192) == o0.floordiv(64)
    assert flat.mod(8192) == o0.mod(64) * 128 + o1
    assert flat.floordiv(8192) * 8192 + flat.mod(8192) == flat


def test_factoring_needs_the_small_terms_below_the_factor():
    o0, o1 = v("o0", 256), v("o1", 129)
    assert "o1" in str((o0 * 128 + o1).floordiv(8192))


def test_floordiv_keeps_what_it_cannot_prove():
    j = v("j", 10)
    assert str(j.floordiv(4)) == "((j) / 4)"


def test_rendered_division_parenthesises_its_argument():
    i, j = v("i", 3), v("j", 100)
    text = (i * 7 + j).floordiv(5).render()
    assert text.startswith("((") and "/ 5)" in text


def test_a_flat_index_split_over_several_dims_recombines_through_nested_quotients():
    """A split reduction's chunk of a channels-last tensor: the flat position ``p`` over
    (n, h, w) indexes ``100352*(p // 784) + 3584*((p // 28) % 28) + 128*(p % 28)``, which
    is ``128*p`` (integer divisions per element otherwise, in every load)."""
    x, r = v("x", 6272), v("r", 128)
    p = x.floordiv(128) * 128 + r
    n, h, w = unflatten(p, (8, 28, 28))
    index = linear_index([n, h, w, x.mod(128)], (100352, 3584, 128, 1))
    assert index == p * 128 + x.mod(128)
    assert "784" not in str(index) and "% 28" not in str(index)


# -- symbolic sizes (sympy symbols of the ShapeEnv, at least 2) --------------------------


def symbolic_facts(*names):
    import sympy
    from torch.utils._sympy.value_ranges import ValueRanges

    from torchkiln_inductor.sizes import SizeFacts

    symbols = [sympy.Symbol(n, integer=True, positive=True) for n in names]
    facts = SizeFacts({s: ValueRanges(2, sympy.oo) for s in symbols}, dict.fromkeys(symbols, 5))
    return facts, symbols


def test_symbolic_rows_split_and_merge_back():
    from torchkiln_inductor.sizes import size_facts

    facts, (s0, s1) = symbolic_facts("s0", "s1")
    with size_facts(facts):
        i, j = v("i", s0), v("j", s1)
        flat = linear_index([i, j], [s1, 1])
        assert unflatten(flat, (s0, s1)) == [i, j]
        n = v("n", s0 * s1)
        a, b = unflatten(n, (s0, s1))
        assert a * s1 + b == n


def test_symbolic_division_keeps_what_the_ranges_do_not_prove():
    from torchkiln_inductor.sizes import size_facts

    facts, (s0, s1) = symbolic_facts("s0", "s1")
    with size_facts(facts):
        i, j = v("i", s0), v("j", s1 + 1)  # j may reach s1: no simplification
        assert (i * s1 + j).floordiv(s1) != i
        assert v("k", s1).floordiv(s1) == Expr()  # k < s1


def test_symbolic_coefficients_render_in_parentheses():
    """A divisor ``32*s0`` printed bare reads as ``/ 32 * s0`` in C."""
    from torchkiln_inductor.sizes import size_facts

    facts, (s0,) = symbolic_facts("s0")
    with size_facts(facts):
        text = v("x", 4 * s0 * s0).floordiv(32 * s0).render()
    assert "/ (32*s0)" in text


def test_a_symbolic_multiple_of_a_coefficient_factors_out_the_small_terms():
    """A transpose of a symbolic view indexes ``(256*s0)*((o0 + 256*o1) // (256*s0)) +
    256*(o1 % s0) + o0`` with ``o0 < 256``: that is ``256*o1 + o0`` (an integer division
    and a modulo per element otherwise, and no vectorized loads)."""
    from torchkiln_inductor.sizes import size_facts

    facts, (s0,) = symbolic_facts("s0")
    with size_facts(facts):
        o0, o1 = v("o0", 256), v("o1", 2 * s0)
        flat = o0 + o1 * 256
        assert flat.floordiv(256 * s0) == o1.floordiv(s0)
        assert flat.mod(256 * s0) == o1.mod(s0) * 256 + o0
        assert flat.floordiv(256 * s0) * (256 * s0) + o1.mod(s0) * 256 + o0 == flat
        wide = v("w", 257) + o1 * 256  # w may reach 256: not below the factor
        assert "w" in str(wide.floordiv(256 * s0))
