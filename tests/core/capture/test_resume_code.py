"""Resume code objects (``torchkiln.capture.resume``) built and run on the running Python.

Needs no torch: run it under pytest, or as a script with Python 3.12 or 3.13, e.g.
``/root/.pyenv/versions/3.12.1/bin/python tests/core/capture/test_resume_code.py``.
"""

import dis
import pathlib
import sys
import types

if "torchkiln" not in sys.modules:  # a script: stand-in packages over core/, so no torch
    _core = pathlib.Path(__file__).resolve().parents[3] / "core"
    for _name, _path in (("torchkiln", _core), ("torchkiln.capture", _core / "capture")):
        sys.modules[_name] = types.ModuleType(_name)
        sys.modules[_name].__path__ = [str(_path)]

from torchkiln.capture import resume


def offset_of(code, opname, argval=None, nth=0):
    hits = [
        i.offset
        for i in dis.get_instructions(code)
        if i.opname == opname and (argval is None or i.argval == argval)
    ]
    return hits[nth]


def after(code, offset):
    instrs = [i for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]
    return next(instrs[k + 1].offset for k, i in enumerate(instrs) if i.offset == offset)


def make(code, fn, *layout):
    new = resume.resume_code(code, *layout)
    return types.FunctionType(new, fn.__globals__, new.co_name, None, fn.__closure__)


def straight(x, y):
    a = x + 1
    b = str(a)
    return a * y, b


def test_resume_after_a_call_takes_the_result_and_the_locals():
    code = straight.__code__
    call = offset_of(code, "CALL")
    fn = make(code, straight, after(code, call), (resume.VALUE,), ("x", "y", "a"))
    assert fn(2, 3, 4, "from the eager call") == (12, "from the eager call")


def looping(xs):
    total = 0
    for x in xs:
        total = total + x
        print(x)
    return total


def test_resume_inside_a_loop_continues_over_the_remaining_items():
    code = looping.__code__
    call = offset_of(code, "CALL")
    # stack at the call's end: the loop iterator (as a list of the rest), print's result
    fn = make(code, looping, after(code, call), (resume.ITER, resume.VALUE), ("xs", "total", "x"))
    assert fn([1, 5, 6], 1, 1, [5, 6], None) == 12


def with_cell(x, scale):
    k = scale * 2
    str(k)
    return [x * k for _ in range(2)], (lambda: k)()


def test_resume_recreates_cells_from_their_contents():
    code = with_cell.__code__
    call = offset_of(code, "CALL", nth=0)
    fn = make(code, with_cell, after(code, call), (resume.VALUE,), ("x", "scale"), ("k",))
    assert fn(3, 5, "ignored", 10) == ([30, 30], 10)


def make_closure(offset):
    def reads_free(x):
        y = str(x)
        return y + offset

    return reads_free


def test_resume_reads_free_variables_through_the_parent_closure():
    reads_free = make_closure("!")
    code = reads_free.__code__
    call = offset_of(code, "CALL")
    fn = make(code, reads_free, after(code, call), (resume.VALUE,), ("x",))
    assert fn(1, "value") == "value!"


def guarded(x, log):
    try:
        str(x)
        y = x + 1
    finally:
        log.append("finally")
    return y


def test_resume_inside_try_keeps_the_finally_handler():
    code = guarded.__code__
    call = offset_of(code, "CALL")
    log = []
    fn = make(code, guarded, after(code, call), (resume.VALUE,), ("x", "log"))
    assert fn(1, log, None) == 2
    assert log == ["finally"]


def test_handler_at_finds_the_try_handler_of_a_call():
    code = guarded.__code__
    handler = resume.handler_at(code, offset_of(code, "CALL"))
    assert handler is not None and handler.target.opname == "PUSH_EXC_INFO"


if __name__ == "__main__":
    tests = [(name, fn) for name, fn in sorted(globals().items()) if name.startswith("test_")]
    for name, fn in tests:
        fn()
        print(f"ok   {name}")
    print(f"{len(tests)} resume-code tests passed on Python {sys.version.split()[0]}")
