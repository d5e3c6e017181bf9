"""Spec (issue 17, capture coverage): user objects compared, turned into text, class
namespaces and user mappings, each traced in one graph with fullgraph=True."""

from collections.abc import MutableMapping

import torch
from torch.testing import assert_close

import torchkiln
from kiln_testing import check_compiled


def vec():
    return (torch.randn(3),)


def one_graph(fn, backend, make_args=vec):
    check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


class Plain:
    pass


class Named:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"Named({self.name})"

    def __repr__(self):
        return f"<{self.name}>"

    def __format__(self, spec):
        return f"{self.name:{spec}}"


# -- ==, is -----------------------------------------------------------------------------


def test_objects_built_in_the_frame_compare_by_identity(backend):
    def fn(x, outside):
        a, b = Plain(), Plain()
        flags = (a == b, a != b, a is b, a is not b, a == a, a is a, a == outside, b is outside)
        return x.sin() if flags == (False, True, False, True, True, True, False, False) else x

    one_graph(fn, backend, lambda: (torch.randn(3), Plain()))


# -- str, repr, f-strings ----------------------------------------------------------------


def test_str_repr_and_format_run_the_class_methods(backend):
    def fn(x):
        n = Named("ab")
        return x + 1, str(n), repr(n), f"{n!s} {n!r} {n:>4} {n}"

    one_graph(fn, backend)


def test_default_repr_names_the_address_at_run_time(backend):
    def fn(x):
        obj = Plain()
        return x * 2, obj, str(obj), f"{obj!r}"

    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3)
        out, obj, text, formatted = compiled(x)
        assert_close(out, x * 2)
        assert text == formatted == object.__repr__(obj)
    assert len(backend.graphs) == 1


# -- a class's __dict__ ------------------------------------------------------------------


class Config:
    scale = 3.0
    shift = 1.0

    def method(self):
        return self


def test_class_dict_is_iterated_read_and_its_keys_guarded(backend):
    def fn(x):
        names = [k for k in Config.__dict__ if not k.startswith("__")]
        total = x * Config.__dict__["scale"]
        for _key, value in type(Config()).__dict__.items():
            if isinstance(value, float):
                total = total + value
        return total + len(names), "extra" in Config.__dict__

    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    assert_close(compiled(x), fn(x))
    Config.extra = 2.0  # a new class attribute: the keys changed, so the entry must not run
    try:
        assert_close(compiled(x), fn(x))
    finally:
        del Config.extra
    assert len(backend.graphs) == 2


# -- user mappings (collections.abc.MutableMapping) --------------------------------------


class TensorMap(MutableMapping):
    def __init__(self):
        self._items = {}

    def __getitem__(self, key):
        return self._items[key]

    def __setitem__(self, key, value):
        self._items[key] = value

    def __delitem__(self, key):
        del self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)


def scaled(x, a=1.0, b=0.0):
    return x * a + b


GLOBAL_MAP = TensorMap()
GLOBAL_MAP["a"], GLOBAL_MAP["b"] = torch.randn(3), torch.randn(3)


def test_mapping_views_dict_and_double_star(backend):
    def fn(x):
        m = GLOBAL_MAP
        copy = dict(m)
        merged = {**m, "c": x}
        out = scaled(x, **m)
        for key, value in m.items():
            out = out + value * len(key)
        out = out + sum(m.values()) * len(m.keys())
        return out, copy, merged, list(m.keys())

    one_graph(fn, backend)


def test_mapping_built_in_the_frame(backend):
    def fn(x):
        m = TensorMap()
        m["a"] = x + 1
        m["b"] = x * 2
        return scaled(x, **m), sorted(m.keys()), "full" if m.values() else "empty"

    one_graph(fn, backend)
