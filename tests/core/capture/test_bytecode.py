"""The bytecode assembler (``torchkiln.capture.bytecode``) on the running Python (3.11 to 3.13).

Needs no torch: run it under pytest, or as a script with any supported
Python, e.g. ``/root/.pyenv/versions/3.12.1/bin/python tests/core/capture/test_bytecode.py``.
"""

import importlib
import inspect
import pathlib
import sys
import types

_CAPTURE = pathlib.Path(__file__).resolve().parents[3] / "core" / "capture"


def _load_bytecode_module() -> types.ModuleType:
    """Load the assembler (and ``bytecode_compat``, which it imports relatively) from a stand-in
    package over ``core/capture``, so that ``torchkiln`` (and torch) is not imported."""
    package = types.ModuleType("kiln_capture_under_test")
    package.__path__ = [str(_CAPTURE)]
    sys.modules[package.__name__] = package
    return importlib.import_module(f"{package.__name__}.bytecode")


bc = _load_bytecode_module()


def loops_and_handlers(x, n):
    out = []
    try:
        for i in range(n):
            if i % 2:
                out.append(x * i)
            else:
                out.append(-i)
    except ValueError:
        return None
    finally:
        out.append("done")
    return out, {k: k for k in range(300) if k > 297}


def many_constants(x):
    values = [0.5, 1.5, 2.5]
    total = x
    for v in values:
        total = total + v
    return (total, *[str(i) for i in range(270)])


def with_a_cell(x):
    k = x * 2

    def read():
        return k + 1

    return read()


def _reassemble(fn, name="copy"):
    code = fn.__code__
    instrs = bc.disassemble(code)
    return bc.assemble(
        instrs, code, varnames=code.co_varnames, argcount=code.co_argcount, name=name
    )


def test_roundtrip_reproduces_the_code_bytes():
    code = _reassemble(loops_and_handlers)
    assert code.co_code == loops_and_handlers.__code__.co_code


def test_roundtrip_reproduces_the_exception_table():
    code = _reassemble(loops_and_handlers)
    assert code.co_exceptiontable == loops_and_handlers.__code__.co_exceptiontable


def test_roundtrip_keeps_line_numbers():
    code = _reassemble(loops_and_handlers)
    assert [line for *_, line in code.co_lines()] == [
        line for *_, line in loops_and_handlers.__code__.co_lines()
    ]


def test_roundtrip_runs_like_the_original():
    copy = types.FunctionType(_reassemble(loops_and_handlers), globals())
    assert copy(3, 5) == loops_and_handlers(3, 5)


def test_cell_variables_survive_a_roundtrip():
    code = _reassemble(with_a_cell)
    assert code.co_code == with_a_cell.__code__.co_code
    assert types.FunctionType(code, globals())(3) == 7


def test_extended_args_survive_a_roundtrip():
    copy = types.FunctionType(_reassemble(many_constants), globals())
    assert copy(1.0) == many_constants(1.0)


def test_prologue_jumping_into_the_middle_resumes_there():
    """A resume-style prologue: load a new argument, jump into the loop body's next statement."""
    code = loops_and_handlers.__code__
    instrs = bc.disassemble(code)
    lines, first = inspect.getsourcelines(loops_and_handlers)
    return_line = first + next(k for k, text in enumerate(lines) if "return out, {" in text)
    target = next(i for i in instrs if i.lineno == return_line)
    prologue = [bc.Instr("RESUME", 0), bc.Instr("JUMP_FORWARD", target=target)]
    varnames = ("out", *[v for v in code.co_varnames if v != "out"])
    new = bc.assemble(prologue + instrs, code, varnames=varnames, argcount=1, name="resume")
    resume = types.FunctionType(new, globals())
    result = resume(["given"])
    assert result[0] == ["given"]
    assert result[1] == {298: 298, 299: 299}


def test_exception_handlers_work_after_a_prologue_shifts_offsets():
    def guarded(x):
        try:
            return 1 / x
        except ZeroDivisionError:
            return "caught"

    code = guarded.__code__
    instrs = bc.disassemble(code)
    prologue = [bc.Instr("NOP") for _ in range(300)]
    new = bc.assemble(
        prologue + instrs, code, varnames=code.co_varnames, argcount=1, name="shifted"
    )
    shifted = types.FunctionType(new, {})
    assert shifted(0) == "caught"
    assert shifted(4) == 0.25


def test_backward_jumps_are_recomputed_when_a_loop_grows_past_255_code_units():
    def loop(n):
        total = 0
        for i in range(n):
            total += i
        return total

    code = loop.__code__
    instrs = bc.disassemble(code)
    body = next(k for k, i in enumerate(instrs) if i.opname == "STORE_FAST" and i.argval == "i")
    grown = instrs[: body + 1] + [bc.Instr("NOP") for _ in range(400)] + instrs[body + 1 :]
    new = bc.assemble(grown, code, varnames=code.co_varnames, argcount=1, name="grown")
    assert types.FunctionType(new, {})(10) == 45


def swaps_and_adds(x):
    a, b = x + 1, x + 2  # 3.13: STORE_FAST_STORE_FAST
    c = a * b  # 3.13: LOAD_FAST_LOAD_FAST
    return [q - c for q in (a, b)]  # 3.13: STORE_FAST_LOAD_FAST (storing q, loading it)


def test_two_locals_in_one_instruction_are_split_when_moved_past_index_15():
    """3.13 packs the two locals of ``LOAD_FAST_LOAD_FAST`` and kin in 4 bits each: a resume
    function that puts new arguments first must write them as two instructions."""
    code = swaps_and_adds.__code__
    padding = tuple(f"arg{k}" for k in range(16))
    new = bc.assemble(
        bc.disassemble(code),
        code,
        varnames=(*padding, *code.co_varnames),
        argcount=17,
        name="shifted",
    )
    assert types.FunctionType(new, {})(*range(16), 3) == swaps_and_adds(3)


if __name__ == "__main__":
    tests = [(name, fn) for name, fn in sorted(globals().items()) if name.startswith("test_")]
    for name, fn in tests:
        fn()
        print(f"ok   {name}")
    print(f"{len(tests)} bytecode tests passed on Python {sys.version.split()[0]}")
