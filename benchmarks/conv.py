"""Convolution on the GPU: cuDNN, cuDNN plus the epilogue kernel, and each template config.

    python -m benchmarks.conv                       # ResNet-18's convolutions at batch 64, and
                                                    # the convnet model's (large), bf16
    python -m benchmarks.conv --models convnet      # one set of shapes (a run of minutes each)
    python -m benchmarks.conv --shapes 64x64x56x64x3x1x1 --epilogue bias_relu --json out.json
    TRITON_INTERPRET=1 python -m benchmarks.conv --device cpu --shapes 2x5x9x6x3x2x1
                                                    # the script itself, on Triton's interpreter

With ``max_autotune_gemm`` every 2-D convolution chooses, at its first call, between aten's
convolution (cuDNN) followed by its pointwise epilogue as a generated kernel of its own, and
the Triton implicit-GEMM template (``plugins/inductor/codegen/triton_templates.py``) with the
epilogue fused into its store, in each of its block configs. For every shape (``--shapes``:
``batch x c_in x side x c_out x kernel x stride x padding``, a square image and kernel) this
compiles ``relu(batch_norm(conv(x, w)))`` (batch norm with running statistics, as ResNet's
inference; ``--epilogue bias_relu``: ``relu(conv(x, w, bias))``) with torchkiln, on a
channels-last input and a weight as a model's parameter is (contiguous, which cuDNN converts
itself and the template reads as it is; ``--channels-last-weight``: channels-last), records
the candidates its tuning builds, and times in one process, on the same inputs, each call
replayed from a CUDA graph (Triton's ``do_bench_cudagraph``, median; the host's cost of a
call is not the GPU's):

* ``cudnn``: ``F.conv2d`` alone (no bias), the floor of what eager's convolution costs;
* ``eager``: the whole function as eager runs it (cuDNN, then batch norm and ReLU kernels);
* ``aten``: the aten choice, cuDNN plus torchkiln's one fused epilogue kernel;
* each template config, the epilogue fused;

then the fastest, each one's ratio to ``aten`` (above 1: faster than cuDNN plus the epilogue),
and the choice the tuner made (its own timing: ``do_bench`` with the L2 flushed). The convnet
model's shapes are the distinct convolutions of its large inference forward, recorded with a
dispatch mode.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from unittest import mock

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.models import MODELS
from benchmarks.rows import on_device

#: the model whose convolutions run beside ResNet-18's, at its large size
ZOO_MODEL = "convnet"
#: ResNet-18's batch for its shapes
RESNET_BATCH = 64


@dataclass(frozen=True)
class ConvShape:
    """A square 2-D convolution: ``[batch, c_in, side, side]`` by ``[c_out, c_in, kernel,
    kernel]``, one stride and padding for both dimensions."""

    name: str
    batch: int
    c_in: int
    side: int
    c_out: int
    kernel: int
    stride: int
    padding: int

    def __str__(self) -> str:
        return (
            f"{self.batch}x{self.c_in}x{self.side}x{self.side} * {self.c_out}x{self.kernel}"
            f"x{self.kernel} s{self.stride} p{self.padding}"
        )


def resnet18_shapes(batch: int) -> list[ConvShape]:
    """ResNet-18's distinct convolutions on 224 x 224 images (torchvision's layout)."""
    table = [
        ("conv1", 3, 224, 64, 7, 2, 3),
        ("layer1", 64, 56, 64, 3, 1, 1),
        ("layer2.0.conv1", 64, 56, 128, 3, 2, 1),
        ("layer2.conv2", 128, 28, 128, 3, 1, 1),
        ("layer2.0.downsample", 64, 56, 128, 1, 2, 0),
        ("layer3.0.conv1", 128, 28, 256, 3, 2, 1),
        ("layer3.conv2", 256, 14, 256, 3, 1, 1),
        ("layer3.0.downsample", 128, 28, 256, 1, 2, 0),
        ("layer4.0.conv1", 256, 14, 512, 3, 2, 1),
        ("layer4.conv2", 512, 7, 512, 3, 1, 1),
        ("layer4.0.downsample", 256, 14, 512, 1, 2, 0),
    ]
    return [ConvShape(f"resnet18.{name}", batch, *sizes) for name, *sizes in table]


class _Convolutions(TorchDispatchMode):
    """Records every square, ungrouped 2-D convolution that runs under it."""

    def __init__(self, model: str):
        super().__init__()
        self.model = model
        self.shapes: dict[tuple, ConvShape] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution.default:
            x, w, _, stride, padding, _, _, _, groups = args
            if groups == 1 and x.dim() == 4:
                (batch, c_in, side, _), (c_out, _, kernel, _) = x.shape, w.shape
                sizes = (batch, c_in, side, c_out, kernel, stride[0], padding[0])
                name = f"{self.model}.{len(self.shapes)}"
                self.shapes.setdefault(sizes, ConvShape(name, *sizes))
        return func(*args, **(kwargs or {}))


def zoo_shapes(device: torch.device, dtype: torch.dtype) -> list[ConvShape]:
    """The distinct convolutions of the convnet model's large inference forward."""
    built = on_device(MODELS[ZOO_MODEL].build("large"), device, dtype)
    built.module.eval()
    with torch.no_grad(), _Convolutions(ZOO_MODEL) as found:
        built.module(*built.inputs)
    return list(found.shapes.values())


def conv_bn_relu(x, w, mean, var, gamma, beta, stride: int, padding: int):
    y = F.conv2d(x, w, None, stride, padding)
    return torch.relu(F.batch_norm(y, mean, var, gamma, beta, training=False))


def conv_bias_relu(x, w, bias, stride: int, padding: int):
    return torch.relu(F.conv2d(x, w, bias, stride, padding))


def bench_us(fn: Callable[[], object], device: torch.device) -> float:
    """``fn``'s median time, replayed from a CUDA graph; on the CPU (the interpreter, to check
    the script) the median wall time, which says nothing of a GPU's."""
    if device.type == "cuda":
        from triton.testing import do_bench_cudagraph

        return do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3
    from torchkiln_inductor.autotune.tuner import wall_median_ms

    return wall_median_ms(fn) * 1e3


@contextmanager
def recorded_tunings():
    """Each template tuning that starts inside, as ``(template, problem, choices, args)``:
    the candidates as the tuner builds them, to time them again here."""
    from torchkiln_inductor.autotune import templates

    tunings: list[tuple] = []
    tune = templates.tune

    def record(kernel, problem, choices, args, *rest, **kwargs):
        tunings.append((kernel, problem, list(choices), args))
        return tune(kernel, problem, choices, args, *rest, **kwargs)

    with mock.patch.object(templates, "tune", record):
        yield tunings


def tuner_pick(problem: tuple, choices: list, max_trials: int) -> str | None:
    """The winner the tuner stored for this problem (``tune``'s key), if any."""
    from torchkiln_inductor.autotune.store import load_winner, tuning_key

    return load_winner(tuning_key(*problem, [c.name for c in choices[:max_trials]]))


def measure(
    shape: ConvShape, dtype: torch.dtype, epilogue: str, weight_layout, device: torch.device
) -> dict:
    """Every time of ``shape`` (microseconds), by name, and what the tuner chose; the weight
    in ``weight_layout`` (a ``torch.memory_format``)."""
    import torchkiln

    x = torch.randn(shape.batch, shape.c_in, shape.side, shape.side, device=device, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    fan_in = shape.c_in * shape.kernel**2
    w = torch.randn(shape.c_out, shape.c_in, shape.kernel, shape.kernel, device=device)
    w = (w / fan_in**0.5).to(dtype).contiguous(memory_format=weight_layout)
    channel = [torch.randn(shape.c_out, device=device, dtype=dtype) for _ in range(3)]
    if epilogue == "bn_relu":
        var = torch.rand(shape.c_out, device=device, dtype=dtype) + 0.5
        fn, args = conv_bn_relu, (x, w, channel[0], var, channel[1], channel[2])
    else:
        fn, args = conv_bias_relu, (x, w, channel[0])

    def run(*tensors):
        return fn(*tensors, shape.stride, shape.padding)

    times = {
        "cudnn": bench_us(lambda: F.conv2d(x, w, None, shape.stride, shape.padding), device),
        "eager": bench_us(lambda: run(*args), device),
    }
    max_trials = 64  # every config: the time budget ends tuning, not the count
    options = {"max_autotune_gemm": True, "autotune.max_trials": max_trials}
    if device.type == "cpu":
        options["cpu_backend"] = "triton"
    torchkiln.reset()
    compiled = torchkiln.compile(run, backend="inductor", options=options)
    with recorded_tunings() as tunings:
        start = time.perf_counter()
        out = compiled(*args)
        first_s = time.perf_counter() - start
    error = (out.float() - run(*args).float()).abs().max().item()
    assert len(tunings) == 1, f"expected one tuned convolution, got {[t[0] for t in tunings]}"
    _, problem, choices, tensors = tunings[0]
    for choice in choices:
        launch = choice.build(tensors)
        times[choice.name] = bench_us(lambda launch=launch: launch(*tensors), device)
    pick = tuner_pick(problem, choices, max_trials)
    return {"shape": asdict(shape), "us": times, "tuner": pick, "tune_s": first_s, "error": error}


def report(result: dict) -> list[str]:
    """Two lines: the fastest against cuDNN and the aten choice; every template config."""
    times = result["us"]
    aten = next(name for name in times if name.startswith("aten."))
    configs = {name: us for name, us in times.items() if name.startswith("BLOCK_M")}
    fastest = min([aten, *configs], key=times.__getitem__)
    best = min(configs, key=configs.__getitem__)
    shape = ConvShape(**result["shape"])
    summary = (
        f"{shape.name:22s} {shape!s:38s} cudnn {times['cudnn']:8.1f}us | eager "
        f"{times['eager']:8.1f}us | cudnn+epilogue {times[aten]:8.1f}us | best template "
        f"{times[best]:8.1f}us ({times[aten] / times[best]:4.2f}x) | fastest: "
        f"{'template' if fastest == best else 'aten'}, tuner chose "
        f"{'aten' if result['tuner'] == aten else 'template'} (tune {result['tune_s']:4.1f}s, "
        f"max|diff| {result['error']:.3g})"
    )
    ranked = sorted(configs, key=configs.__getitem__)
    cells = [
        f"{_short(name)} {configs[name]:.1f}us {times[aten] / configs[name]:4.2f}x"
        for name in ranked
    ]
    return [summary, "    " + " | ".join(cells)]


def _short(config: str) -> str:
    """``BLOCK_M=128,BLOCK_N=64,BLOCK_K=64,GROUP_M=8,warps=4,stages=4`` as ``128x64x64/w4s4``."""
    values = dict(part.split("=") for part in config.split(","))
    blocks = "x".join(values[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return f"{blocks}/w{values['warps']}s{values['stages']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes",
        help="comma list of BATCHxC_INxSIDExC_OUTxKERNELxSTRIDExPADDING (default: those of "
        "--models)",
    )
    parser.add_argument(
        "--models", default="resnet18,convnet", help="whose shapes, without --shapes"
    )
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--epilogue", choices=("bn_relu", "bias_relu"), default="bn_relu")
    parser.add_argument(
        "--cudnn-benchmark", action="store_true", help="let cuDNN time its algorithms first"
    )
    parser.add_argument(
        "--channels-last-weight", action="store_true", help="weights channels-last, not contiguous"
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", help="write every time here too (after each shape)")
    args = parser.parse_args()
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    if args.shapes:
        sizes = [[int(d) for d in s.split("x")] for s in args.shapes.split(",")]
        shapes = [ConvShape(f"shape{i}", *s) for i, s in enumerate(sizes)]
    else:
        models = args.models.split(",")
        shapes = resnet18_shapes(RESNET_BATCH) if "resnet18" in models else []
        shapes += zoo_shapes(device, dtype) if ZOO_MODEL in models else []
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreter)"
    weights = "channels-last" if args.channels_last_weight else "contiguous"
    print(
        f"{name}, {dtype}, epilogue {args.epilogue}, {weights} weights, torch {torch.__version__}"
    )
    print("x: cudnn+epilogue time / template time (above 1: the template is faster)")
    results = []
    for shape in shapes:
        weight_layout = (
            torch.channels_last if args.channels_last_weight else torch.contiguous_format
        )
        results.append(measure(shape, dtype, args.epilogue, weight_layout, device))
        for line in report(results[-1]):
            print(line, flush=True)
        if args.json:  # after every shape: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump({"device": name, "dtype": args.dtype, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
