"""Masks and reductions of the generated Triton kernels: what the compiled code keeps per
element (issue #16).

``kiln_mask`` makes a mask a constant, all true, where the block divides the extent, decided
per launch (the autotuner varies block sizes over one source); a persistent Welford counts
each row's length without a reduction; max and min keep NaN in one reduction. Results run
through Triton's interpreter; that the masks fold away is checked on the kernel compiled for
sm_90, the H200's (its Triton IR: no GPU needed).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import check, compile_fn, needs_interpreter

from torchkiln_inductor.autotune.configs import candidates
from torchkiln_inductor.codegen.triton import _ROUND_BF16
from torchkiln_inductor.codegen.triton_launch import launcher_for
from torchkiln_inductor.codegen.triton_libdevice import libdevice_binding

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = needs_interpreter

TRITON = {"cpu_backend": "triton"}
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
# (rows, row length): rows a multiple of XBLOCK or not; a row one block (persistent) or
# looped over blocks (over TRITON_PERSISTENT_MAX), the blocks dividing it or not
SHAPES = {
    "persistent_dividing": (8, 64),
    "persistent_ragged": (6, 20),
    "looped_dividing": (2, 8192),
    "looped_ragged": (3, 5000),
}


def triton_check(fn, *args, **kwargs):
    compiled = check(fn, *args, **TRITON, **kwargs)
    assert compiled.artifact.triton is not None and compiled.artifact.cpp_source == ""
    return compiled


def _with_nan_rows(shape, dtype):
    """Small integers (ties, so that argmax must pick the first), a NaN late in row 0, row 1
    all NaN, and, with more rows, a row of -inf and a NaN first in the last row."""
    rows, width = shape
    x = torch.randint(-4, 5, shape).to(dtype)
    x[0, width - 3] = float("nan")
    x[1] = float("nan")
    if rows > 2:
        x[2] = float("-inf")
        x[-1, 0] = float("nan")
    return x


def _chain(x, w, b):
    return torch.softmax(F.layer_norm(F.gelu(x * w + b), x.shape[-1:]), -1)


def _chain_args(rows, width, dtype):
    return [torch.randn(rows, width, dtype=dtype), *torch.randn(2, width, dtype=dtype)]


EXTREMES = {
    "amax": lambda x: x.amax(1),
    "amin": lambda x: x.amin(-1),
    "max": lambda x: x.max(1),
    "min": lambda x: x.min(1),
    "argmax": lambda x: x.argmax(1),
    "argmin": lambda x: x.argmin(1),
    "amax_down_columns": lambda x: x.amax(0),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
}


#: looped rows: fewer cases (the interpreter runs a reduction's combine lane after lane)
LOOPED_EXTREMES = ("amax", "max", "min", "amax_down_columns", "softmax")


@pytest.mark.parametrize(
    "name, shape, dtype",
    [
        pytest.param(name, shape, dtype, id=f"{where}-{name}-{dtype}")
        for where, shape in SHAPES.items()
        for name in EXTREMES
        for dtype in FLOATS
        if where.startswith("persistent") or (name in LOOPED_EXTREMES and dtype != torch.float16)
    ],
)
def test_max_and_min_keep_nan_and_pick_the_first_position(name, shape, dtype):
    triton_check(EXTREMES[name], _with_nan_rows(shape, dtype))


@pytest.mark.parametrize(
    "name, shape, dtype",
    [
        pytest.param(name, shape, dtype, id=f"{where}-{name}-{dtype}")
        for where, shape in SHAPES.items()
        for name in ("amax", "amin", "argmax", "argmin")
        for dtype in (torch.int32, torch.int64, torch.bool)
        if not (dtype == torch.bool and name.startswith("arg"))  # eager takes no bool there
    ],
)
def test_integer_and_bool_max_and_min(name, shape, dtype):
    triton_check(EXTREMES[name], torch.randint(-3, 4, shape).to(dtype))


WELFORD = {
    "var": lambda x: x.var(1),
    "std_mean": lambda x: torch.std_mean(x, 1, correction=0),
    "var_down_columns": lambda x: x.var(0),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn", WELFORD.values(), ids=WELFORD.keys())
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_welford_counts_each_row_s_length(fn, shape, dtype):
    """Rows past the last one in a block (ragged shapes) count a row's length too: nothing
    of theirs is stored, and nothing of theirs divides by zero into a kept row."""
    # away from zero: the interpreter adds a looped row's lanes one after another
    triton_check(fn, (torch.randn(shape) + 2).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_chain_matches_eager(shape, dtype):
    args = _chain_args(*shape, dtype)
    args[0][1, 3] = float("nan")  # a NaN row through layer norm and softmax
    if dtype == torch.float32:
        triton_check(_chain, *args, rtol=1e-4, atol=1e-5)
        return
    # bfloat16: the fused kernel keeps float32 between ops; outputs (at most 1) may differ
    # from eager's by a bfloat16 step of 1.0
    compiled = compile_fn(_chain, *args, **TRITON)
    expected = _chain(*[a.float() for a in args]).to(torch.bfloat16)
    torch.testing.assert_close(compiled(*args)[0], expected, atol=8e-3, rtol=1.6e-2, equal_nan=True)


@pytest.mark.parametrize(
    "name, shape",
    [("amax", (3, 5120)), ("var", (3, 5120)), ("amin", (6, 20)), ("var", (6, 64))],
    ids=["amax_looped", "var_looped", "amin_persistent", "var_persistent"],
)
def test_every_candidate_block_size_runs_the_same_source(name, shape, tmp_path):
    """The autotuner's configs launch one source with other ``XBLOCK``/``RBLOCK``: dividing
    the extents (3 rows by 1, 6 by 2, 5120 by 1024) or not, each launch matches eager. Each
    block is varied alone (the interpreter has no warps or stages)."""
    fn = WELFORD[name] if name == "var" else EXTREMES[name]
    x = torch.randn(shape) if name == "var" else _with_nan_rows(shape, torch.float32)
    compiled = compile_fn(fn, x, **TRITON)
    expected = fn(x)
    (launch,) = compiled.artifact.triton.launches
    assert len(launch.params) == 2, launch.params  # x in, the result out
    path = tmp_path / "kernels.py"
    path.write_text(compiled.artifact.triton.source)
    spec = importlib.util.spec_from_file_location("kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = getattr(module, launch.name)
    heuristic = dict(launch.meta)
    configs = {
        c.meta: c for c in candidates(launch) if sum(v != heuristic[k] for k, v in c.meta) <= 1
    }
    for block, numel in [("XBLOCK", launch.xnumel), *launch.rnumels]:
        if numel > heuristic[block] or block == "XBLOCK":  # tuned: some divide, some not
            assert {numel % dict(meta)[block] == 0 for meta in configs} == {True, False}
    for config in configs.values():
        out = torch.full_like(expected, -7)
        launcher_for(kernel, *config.launch(launch.xnumel))(x, out)
        torch.testing.assert_close(out, expected, equal_nan=True, msg=config.name)


# -- the generated source -------------------------------------------------------------------


def _kernels(compiled) -> str:
    """The generated kernels, without the prelude's helpers."""
    source = compiled.artifact.triton.source
    return source[source.index("def kiln_red_") :]


def test_chain_kernel_at_a_dividing_size_keeps_no_mask_count_or_nan_flag():
    """32768 x 4096 in bfloat16 (issue #16), here 16 x 1024: one program a row, the row one
    block. Its masks go through ``kiln_mask`` and the launch's blocks divide the extents;
    Welford's count is the row length, not a sum of the mask; max is one reduction."""
    compiled = compile_fn(_chain, *_chain_args(16, 1024, torch.bfloat16), **TRITON)
    (launch,) = compiled.artifact.triton.launches
    kernels = _kernels(compiled)
    assert "tl.sum((xmask" not in kernels, kernels
    assert not re.search(r"!= \w+\)\.to\(tl\.int32\), 1\) != 0", kernels), kernels
    assert "tl.reduce(" in kernels and "kiln_reduce_max)" in kernels, kernels
    assert re.search(r"= tl\.full\(\[XBLOCK, 1\], 1024\.0, tl\.float32\)", kernels), kernels
    assert not re.search(r"mask = \w+ < ", kernels), kernels  # every mask is kiln_mask's
    masks = re.findall(r"(\w+) = kiln_mask\((\w+), (\d+), (\w+)\)", kernels)
    assert {m[0] for m in masks} == {"xmask", "r0indexmask"}, kernels
    meta = dict(launch.meta)
    assert all(int(numel) % meta[block] == 0 for _, _, numel, block in masks), (masks, meta)


def test_chain_kernel_at_a_ragged_size_keeps_its_masks():
    compiled = compile_fn(_chain, *_chain_args(5, 1000, torch.bfloat16), **TRITON)
    kernels = _kernels(compiled)
    assert "kiln_mask(xindex, 5, XBLOCK)" in kernels, kernels
    assert "kiln_mask(r0index, 1000, RBLOCK0)" in kernels, kernels
    assert re.search(r"= tl\.full\(\[XBLOCK, 1\], 1000\.0, tl\.float32\)", kernels), kernels


_COMPILE_TTIR = textwrap.dedent(
    """
    import importlib.util, json, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source, launches = sys.argv[1], json.loads(sys.argv[2])
    spec = importlib.util.spec_from_file_location("kernels", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = {}
    for name, meta, num_warps, dtypes in launches:
        fn = getattr(module, name)
        params = [p for p in fn.arg_names if p not in meta]
        signature = {p: "*" + d for p, d in zip(params, dtypes)} | dict.fromkeys(meta, "constexpr")
        # pointers 16-byte aligned, as the launcher specializes them
        attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(params))}
        src = ASTSource(fn, signature, constexprs=meta, attrs=attrs)
        target = GPUTarget("cuda", 90, 32)
        out[name] = triton.compile(src, target=target, options={"num_warps": num_warps}).asm["ttir"]
    print(json.dumps(out))
    """
)
_TRITON_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _ttir(compiled, tmp_path) -> dict[str, str]:
    """Each kernel's Triton IR as compiled for the GPU (in a process without the interpreter,
    the prelude's GPU variants swapped in)."""
    pytest.importorskip("triton.backends.nvidia.compiler", reason="no CUDA backend in triton")
    source = compiled.artifact.triton.source.replace(_ROUND_BF16[True], _ROUND_BF16[False])
    source = source.replace(libdevice_binding(True), libdevice_binding(False))
    path = tmp_path / "kernels.py"
    path.write_text(source)
    launches = [
        (k.name, dict(k.meta), k.num_warps, [_TRITON_DTYPES[d] for d in k.dtypes])
        for k in compiled.artifact.triton.launches
    ]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    run = subprocess.run(
        [sys.executable, "-c", _COMPILE_TTIR, str(path), json.dumps(launches)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_chain_kernel_compiles_to_unmasked_loads_and_four_reductions(tmp_path):
    """On the GPU the all-true masks fold away: loads and stores unmasked, no selects; two
    reductions for layer norm's statistics, one for softmax's max, one for its sum."""
    compiled = compile_fn(_chain, *_chain_args(16, 1024, torch.bfloat16), **TRITON)
    (ttir,) = _ttir(compiled, tmp_path).values()
    loads = re.findall(r"tt\.load [^:]*:", ttir)
    stores = re.findall(r"tt\.store [^:]*:", ttir)
    assert len(loads) == 3 and all(load.count(",") == 0 for load in loads), loads  # x, w and b
    assert len(stores) == 1 and stores[0].count(",") == 1, stores  # pointer, value: no mask
    assert "arith.select" not in ttir, ttir
    assert ttir.count('"tt.reduce"') == 4, ttir


def test_ragged_chain_kernel_compiles_with_its_masks(tmp_path):
    compiled = compile_fn(_chain, *_chain_args(5, 1000, torch.bfloat16), **TRITON)
    (ttir,) = _ttir(compiled, tmp_path).values()
    loads = re.findall(r"tt\.load [^:]*:", ttir)
    assert loads and all(load.count(",") >= 1 for load in loads), loads
    assert "arith.select" in ttir
