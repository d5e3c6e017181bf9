"""What each model of the suite costs to compile: torchkiln (inductor) beside torch.compile.

    python -m benchmarks.models_report                                # the suite, tiny, both
    python -m benchmarks.models_report --models hf_llama,timm_resnet --size small
    python -m benchmarks.models_report --compilers kiln --json out.json --markdown out.md

Per model and compiler, printed as one markdown table:

* **graphs / breaks**: ``torchkiln.explain`` / ``torch._dynamo.explain`` of an
  inference call (``eval()``, ``no_grad``);
* **recompiled**: frames captured again by the second inference call, at
  another batch / sequence size (``Built.resized_inputs``): torchkiln's
  ``counters["frames"]["total"]``, torch's ``counters["frames"]["ok"]``;
* **cold s**: wall time of the first call, compile included, from empty
  in-process caches and fresh cache folders (``benchmarks.caches``): an
  inference call, and a training step (forward and backward of
  ``mean(out**2)``); each compiler's one-time start-up is paid before, on
  ``x + 1``;
* **max abs diff**: largest difference from eager of the inference outputs at
  both sizes and of the training step's gradients.

Each model runs in its own process (``--timeout`` seconds), so a crash or a
hang costs that model only and every compile is cold; one torch thread and
in-process inductor compiles, as in ``benchmarks.run`` on a CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.caches import compiler_caches, reset_compilers
from benchmarks.models import MODELS, SIZES, group
from benchmarks.rows import describe_error
from benchmarks.tables import fmt, markdown_table

COMPILERS = {"kiln": "torchkiln inductor", "torch": "torch.compile"}


def _compile(compiler: str, fn: Callable) -> Callable:
    if compiler == "torch":
        return torch.compile(fn)
    import torchkiln

    return torchkiln.compile(fn, backend="inductor")


def _frames_captured(compiler: str) -> int:
    if compiler == "torch":
        from torch._dynamo.utils import counters

        return counters["frames"]["ok"]
    import torchkiln

    return torchkiln.counters["frames"]["total"]


def _explain(compiler: str, model: torch.nn.Module, inputs: tuple) -> tuple[int, int]:
    reset_compilers()
    with torch.no_grad():
        if compiler == "torch":
            out = torch._dynamo.explain(model)(*inputs)
        else:
            import torchkiln

            out = torchkiln.explain(model)(*inputs)
    return out.graph_count, out.graph_break_count


def _max_diff(actual: list[torch.Tensor | None], expected: list[torch.Tensor | None]) -> float:
    return max(
        ((a - e).abs().max().item() for a, e in zip(actual, expected) if e is not None),
        default=0.0,
    )


def measure(name: str, size: str, compiler: str, cache_root: Path) -> dict[str, Any]:
    """One model under one compiler: every figure of the table; a phase that fails gives its
    error in ``errors`` and the others still run."""
    result: dict[str, Any] = {"model": name, "compiler": compiler, "errors": []}
    built = MODELS[name].build(size)

    def inference() -> None:
        model = copy.deepcopy(built.module).eval()
        twin = copy.deepcopy(model)
        with compiler_caches(cache_root / f"{name}-{compiler}-inference"), torch.no_grad():
            compiled = _compile(compiler, model)
            start = time.perf_counter()
            out = compiled(*built.inputs)
            result["cold_inference_s"] = time.perf_counter() - start
            before = _frames_captured(compiler)
            resized = compiled(*built.resized_inputs)
            result["recompiled"] = _frames_captured(compiler) - before
            result["max_diff_inference"] = _max_diff(
                [out, resized], [twin(*built.inputs), twin(*built.resized_inputs)]
            )

    def training() -> None:
        model = copy.deepcopy(built.module).train()
        twin = copy.deepcopy(model)
        with compiler_caches(cache_root / f"{name}-{compiler}-training"):
            compiled = _compile(compiler, model)
            start = time.perf_counter()
            compiled(*built.inputs).float().square().mean().backward()
            result["cold_training_s"] = time.perf_counter() - start
        twin(*built.inputs).float().square().mean().backward()
        result["max_diff_training"] = _max_diff(
            [p.grad for p in model.parameters()], [p.grad for p in twin.parameters()]
        )

    def explain() -> None:
        model = copy.deepcopy(built.module).eval()
        result["graphs"], result["breaks"] = _explain(compiler, model, built.inputs)

    for phase, run in (("inference", inference), ("training", training), ("explain", explain)):
        try:
            run()
        except Exception as error:
            result["errors"].append(describe_error(phase, error))
    return result


def warm_up(compiler: str) -> None:
    """Pay a compiler's one-time start-up (imports, toolchain checks) outside the timings."""
    with tempfile.TemporaryDirectory() as directory, compiler_caches(Path(directory)):
        _compile(compiler, lambda x: x + 1)(torch.ones(2))


def one_model(name: str, size: str, compilers: list[str]) -> list[dict[str, Any]]:
    torch.set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory() as root:
        for compiler in compilers:
            warm_up(compiler)
            results.append(measure(name, size, compiler, Path(root)))
    return results


def run_in_process(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """``one_model`` in a fresh process: a crash or a hang is that model's error only."""
    cmd = [sys.executable, "-m", "benchmarks.models_report", "--one", name,
           "--size", args.size, "--compilers", args.compilers]  # fmt: skip
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    compilers = args.compilers.split(",")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return [{"model": name, "compiler": c, "errors": [f"hung: over {args.timeout} s"]} for c in compilers]  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [{"model": name, "compiler": c, "errors": [f"crashed: {tail}"]} for c in compilers]
    return [json.loads(line) for line in lines]


def table(results: list[dict[str, Any]], compilers: list[str]) -> str:
    by_key = {(r["model"], r["compiler"]): r for r in results}
    models = list(dict.fromkeys(r["model"] for r in results))
    columns = [
        ("graphs / breaks", lambda r: f"{r['graphs']} / {r['breaks']}"),
        ("recompiled", lambda r: str(r["recompiled"])),
        ("cold inference s", lambda r: fmt(r["cold_inference_s"])),
        ("cold training s", lambda r: fmt(r["cold_training_s"])),
        ("max abs diff inference", lambda r: fmt(r["max_diff_inference"])),
        ("max abs diff training", lambda r: fmt(r["max_diff_training"])),
    ]
    header = ["model"] + [f"{c} {title}" for title, _ in columns for c in compilers]
    body = []
    for model in models:
        row = [model]
        for _, cell in columns:
            for compiler in compilers:
                r = by_key.get((model, compiler), {})
                try:
                    row.append(cell(r))
                except KeyError:
                    row.append("FAIL" if r.get("errors") else "-")
        body.append(row)
    failures = [
        f"- {r['model']} ({r['compiler']}): {e}" for r in results for e in r.get("errors", [])
    ]
    return "\n".join([markdown_table(header, body), *(["", "Failures:", *failures] if failures else [])])  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.models_report", description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--models", default="suite", help=f"suite, or a comma list of: {', '.join(MODELS)}")  # fmt: skip
    p.add_argument("--size", choices=SIZES, default="tiny")
    p.add_argument("--compilers", default="kiln,torch", help="comma list of: kiln, torch")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", type=Path, help="write the table here too")
    p.add_argument("--one", help=argparse.SUPPRESS)  # the worker: one model, JSON lines out
    args = p.parse_args(argv)
    unknown = set(args.compilers.split(",")) - set(COMPILERS)
    if unknown:
        p.error(f"unknown compiler(s) {', '.join(sorted(unknown))}; use {', '.join(COMPILERS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    compilers = args.compilers.split(",")
    if args.one:
        for result in one_model(args.one, args.size, compilers):
            print(json.dumps(result), flush=True)
        return 0
    names = group("suite") if args.models == "suite" else args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; models: {', '.join(MODELS)}")
    results = []
    for name in names:
        reason = MODELS[name].unavailable_reason()
        if reason:
            results += [{"model": name, "compiler": c, "errors": [f"skip: {reason}"]} for c in compilers]  # fmt: skip
            continue
        print(f"[models_report {time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
        results += run_in_process(name, args)
    text = f"size={args.size}, compilers: {', '.join(COMPILERS[c] for c in compilers)}\n\n"
    text += table(results, compilers)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps({"size": args.size, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
