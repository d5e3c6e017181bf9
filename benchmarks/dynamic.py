"""Dynamic shapes (#19): HF GPT-2 over many sequence lengths, every backend side by side.

    python -m benchmarks.dynamic --device cpu --size tiny
    python -m benchmarks.dynamic --device cuda --json out.json --markdown out.md

One process runs the backends one after another (eager, torch.compile with its
default automatic dynamic shapes, torchkiln backends), each case from emptied
in-process compiler caches and a fresh cache folder (``benchmarks.caches``), after
each compiler's one-time start-up was paid on ``x + 1`` (as ``benchmarks.run`` does).
Per backend and case:

* **the sweep**: one call at each of N random sequence lengths in [1, max]
  (distinct, seeded, the same for every backend, in the order drawn);
* **steady state**: once every backend has swept, every length again ``--reps`` times,
  the backends' calls interleaved (one call of each in turn), the median per length: a
  backend timed in a stretch of its own took that stretch's host load (eager's own figure
  moved from 13.1 to 20.7 µs/token between two runs) and whatever the backends measured
  before it left running;
* **compiles**: torch.compile: the graphs dynamo compiled
  (``counters["stats"]["unique_graphs"]``); torchkiln: frames captured
  (``counters["frames"]["total"]``) + backend compiles of one concrete size
  (``counters["static_shapes"]["specializations"]``, for backends that take no
  symbolic sizes). **Per frame**: all compiles over those of the first call;
* **compile s**: the sum over the sweep of each call's time minus that length's
  steady median. Not a compiler's own timer (torchkiln has none): the same
  measure for every backend, which also counts lazy compiles (torch.compile's
  backward, at the first backward call). eager's figure is what first calls
  cost without any compile: the noise floor;
* **steady µs/token**: the per-length medians summed, over the tokens (batch x
  length, summed); **x eager**, **x torch.compile**: their µs/token over this
  backend's (> 1: faster).

Cases: inference (``eval()``, ``no_grad``, forward) and training (forward, loss
``mean(logits**2)``, backward, AdamW step; the module is compiled, the loss and
the optimizer run eagerly; one optimizer for the whole sweep). The model is the
zoo's ``hf_gpt2`` at ``--size``, its position table grown to ``--max-length``
rows (the zoo's tiny and small ones have 16 and 64); the batch is the size's.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.caches import compiler_caches
from benchmarks.cases import CASES, loss_of
from benchmarks.measure import median, step_times_ms, timed_call
from benchmarks.models import MODELS, SEED, SIZES, Built, random_tokens
from benchmarks.models.hf import SHAPES
from benchmarks.overhead import per_call_overhead_us
from benchmarks.results import FAILED, OK
from benchmarks.rows import cache_dir_for, describe_error, on_device
from benchmarks.tables import fmt, markdown_table
from benchmarks.variants import (
    EAGER,
    TORCH_COMPILE,
    TORCHKILN,
    Variant,
    discover_kiln_backends,
    select_variants,
)

MODEL = "hf_gpt2"
DEFAULT_BACKENDS = "eager,torch.compile,kiln:inductor,kiln:aot_eager,kiln:eager"
#: The targets of #19, checked for every torchkiln backend.
MAX_COMPILES_PER_FRAME = 2
MAX_COMPILE_SHARE = 0.5  # of torch.compile's compile time


@dataclass
class Result:
    """One backend x case: the sweep's and the steady state's times (s) and the compile counts."""

    backend: str
    case: str
    lengths: list[int]
    status: str = FAILED
    error: str = ""
    first_call_s: list[float] = field(default_factory=list)
    steady_s: list[float] = field(default_factory=list)
    compiles: int = 0
    specializations: int = 0
    first_call_compiles: int = 0
    eager_fallbacks: int = 0
    compile_s: float | None = None
    us_per_token: float | None = None
    compiles_per_frame: float | None = None
    x_eager: float | None = None
    x_torch_compile: float | None = None


def draw_lengths(count: int, max_length: int, rng: random.Random) -> list[int]:
    return rng.sample(range(1, max_length + 1), count)


def build_model(size: str, max_length: int) -> torch.nn.Module:
    """The zoo's GPT-2, its position embedding grown to ``max_length`` rows (the new rows seeded:
    the zoo build seeds torch's generator, and nothing else draws from it in between)."""
    module = MODELS[MODEL].build(size).module
    gpt2 = module.model.transformer
    old = gpt2.wpe
    if max_length > old.num_embeddings:
        gpt2.wpe = torch.nn.Embedding(max_length, old.embedding_dim)
        with torch.no_grad():
            gpt2.wpe.weight.normal_(std=module.model.config.initializer_range)
            gpt2.wpe.weight[: old.num_embeddings] = old.weight
        module.model.config.n_positions = max_length
    return module


def make_step(module: torch.nn.Module, forward: Callable, case: str) -> Callable[[Any], Any]:
    """One step of ``case`` on the token ids it is given (``cases.make_workload`` fixes its
    inputs and makes an optimizer per workload; the sweep needs one for every length)."""
    if case == "inference":
        module.eval()

        def infer(tokens: torch.Tensor) -> Any:
            with torch.no_grad():
                return forward(tokens)

        return infer
    module.train()
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)

    def train(tokens: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(forward(tokens))
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train


def compile_counts(variant: Variant) -> tuple[int, int, int]:
    """(frames or graphs compiled, backend specializations, calls run eagerly) in this process."""
    if variant.kind == TORCH_COMPILE:
        from torch._dynamo.utils import counters

        return counters["stats"]["unique_graphs"], 0, 0
    if variant.kind == TORCHKILN:
        import torchkiln

        c = torchkiln.counters
        fallbacks = sum(c["eager_fallback"].values())
        return c["frames"]["total"], c["static_shapes"]["specializations"], fallbacks
    return 0, 0, 0


def _since(before: tuple[int, ...], variant: Variant) -> tuple[int, ...]:
    return tuple(now - then for now, then in zip(compile_counts(variant), before))


def sweep(
    variant: Variant,
    case: str,
    module: torch.nn.Module,
    tokens: dict[int, torch.Tensor],
    result: Result,
) -> Callable[[Any], Any]:
    """The sweep into ``result`` (filled as it goes: a failure keeps what was measured
    before it); returns the compiled step, for the steady state."""
    device = next(module.parameters()).device
    before = compile_counts(variant)
    # the compile call counts with the first step, as in the harness (``rows.first_step``)
    step, compile_call_s = timed_call(
        lambda: make_step(module, variant.compile(module), case), device
    )
    for length in result.lengths:
        _, seconds = timed_call(functools.partial(step, tokens[length]), device)
        result.first_call_s.append(seconds + compile_call_s)
        compile_call_s = 0.0
        if len(result.first_call_s) == 1:
            result.first_call_compiles = sum(_since(before, variant)[:2])
    result.compiles, result.specializations, result.eager_fallbacks = _since(before, variant)
    return step


def steady_state(
    swept: list[tuple[Result, Callable[[Any], Any]]],
    tokens: dict[int, torch.Tensor],
    reps: int,
    device: torch.device,
) -> None:
    """Every length ``reps`` times more for each swept backend, their calls interleaved;
    each result gets its per-length medians and the figures made from them. A backend
    whose call raises drops out with the error."""
    live = list(swept)
    times: dict[int, list[list[float]]] = {id(r): [[] for _ in r.lengths] for r, _ in swept}
    lengths = swept[0][0].lengths if swept else []
    for i, length in enumerate(lengths):
        for _ in range(reps):
            for result, step in list(live):
                call = functools.partial(step, tokens[length])
                try:
                    times[id(result)][i] += step_times_ms(call, device, 0, 1, math.inf)
                except Exception as e:
                    result.error = describe_error("steady state", e)
                    live.remove((result, step))
    batch = next(iter(tokens.values())).shape[0] if tokens else 0
    for result, _ in live:
        result.steady_s = [median(t) / 1e3 for t in times[id(result)]]
        result.compile_s = sum(f - s for f, s in zip(result.first_call_s, result.steady_s))
        result.us_per_token = sum(result.steady_s) / (batch * sum(result.lengths)) * 1e6
        if result.first_call_compiles:
            total = result.compiles + result.specializations
            result.compiles_per_frame = total / result.first_call_compiles
        result.status = OK


def relate(results: list[Result]) -> None:
    """Each result's steady speed over eager's and torch.compile's, for the same case."""
    for r in results:
        if r.status != OK:
            continue
        for attribute, reference in (("x_eager", EAGER), ("x_torch_compile", TORCH_COMPILE)):
            base = _find(results, reference, r.case)
            if base is not None:
                setattr(r, attribute, base.us_per_token / r.us_per_token)


def _find(results: list[Result], backend: str, case: str) -> Result | None:
    """The result of ``backend`` for ``case``, when it ran."""
    return next((r for r in results if (r.backend, r.case, r.status) == (backend, case, OK)), None)


def target_lines(results: list[Result]) -> list[str]:
    """One line per torchkiln backend and case: the targets of #19, PASS, FAIL or INCOMPLETE
    (without a torch.compile result to compare with)."""
    lines = []
    for r in results:
        if r.backend in (EAGER, TORCH_COMPILE):
            continue
        where = f"{r.backend} {r.case}"
        if r.status != OK:
            lines.append(f"{where}: FAIL: {r.error}")
            continue
        reference = _find(results, TORCH_COMPILE, r.case)
        per_frame = r.compiles_per_frame
        checks = [(
            f"compiles/frame {fmt(per_frame)} <= {MAX_COMPILES_PER_FRAME}",
            per_frame is not None and per_frame <= MAX_COMPILES_PER_FRAME,
        )]  # fmt: skip
        if reference is None:
            checks.append(("compile time and steady speed: no torch.compile result", None))
        else:
            limit = MAX_COMPILE_SHARE * reference.compile_s
            checks += [
                (f"compile {fmt(r.compile_s)} s <= {MAX_COMPILE_SHARE} x {fmt(reference.compile_s)} s",
                 r.compile_s <= limit),
                (f"steady {fmt(r.x_torch_compile)}x torch.compile >= 1", r.x_torch_compile >= 1),
            ]  # fmt: skip
        verdicts = {ok for _, ok in checks}
        verdict = "FAIL" if False in verdicts else "INCOMPLETE" if None in verdicts else "PASS"
        words = {True: "ok", False: "MISSED", None: "n/a"}
        detail = "; ".join(f"{text} {words[ok]}" for text, ok in checks)
        lines.append(f"{where}: {verdict}: {detail}")
    return lines


def _compiles_cell(r: Result) -> str:
    if r.backend == EAGER:
        return "-"
    if r.backend == TORCH_COMPILE:
        return str(r.compiles)
    return f"{r.compiles} + {r.specializations}"


def results_table(results: list[Result]) -> str:
    header = ["backend", "case", "compiles", "compile s", "steady µs/token", "x eager",
              "x torch.compile"]  # fmt: skip
    body = []
    for r in results:
        if r.status != OK:
            body.append([r.backend, r.case, "FAIL", "", "", "", ""])
            continue
        body.append([
            r.backend, r.case, _compiles_cell(r), fmt(r.compile_s), fmt(r.us_per_token),
            fmt(r.x_eager, "x"), fmt(r.x_torch_compile, "x"),
        ])  # fmt: skip
    return markdown_table(header, body)


def render(meta: dict[str, Any], results: list[Result]) -> str:
    lengths = meta["lengths"]
    lines = [
        f"## dynamic shapes: {MODEL} ({meta['size']}, batch {meta['batch']}), {meta['device']} "
        f"({meta['where']}), {meta['dtype']}, {meta['date_utc']}, wall {meta['wall_s']:.0f} s, "
        f"torch {meta['torch']}",
        f"Sequence lengths in [1, {meta['max_length']}], seed {meta['seed']}: "
        + "; ".join(f"{case} {sorted(lengths[case])}" for case in meta["cases"])
        + f". Steady state: median of {meta['reps']} calls per length.",
        results_table(results),
        "compiles: torch.compile: graphs compiled; torchkiln: frames captured + backend "
        "compiles of one size. compile s: the sweep's calls minus their steady-state times "
        "(eager's: first-call costs with no compile). x: µs/token over this backend's.",
    ]
    failures = [f"- {r.backend} {r.case}: {r.error}" for r in results if r.status != OK]
    if failures:
        lines.append("Failed:\n" + "\n".join(failures))
    lines.append(
        f"### Targets (#19): <= {MAX_COMPILES_PER_FRAME} compiles per frame, compile time <= "
        f"{MAX_COMPILE_SHARE} x torch.compile's, steady speed >= torch.compile's\n\n"
        + "\n".join(f"- {line}" for line in target_lines(results) or ["(no torchkiln backend)"])
    )
    return "\n\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.dynamic", description=__doc__.split("\n")[0]
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--size", choices=SIZES, help="default: small on cpu, large on cuda")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="default: float32 on cpu, bfloat16 on cuda")  # fmt: skip
    p.add_argument("--lengths", type=int, default=30, help="inference sequence lengths")
    p.add_argument("--train-lengths", type=int, default=10, help="training sequence lengths")
    p.add_argument("--max-length", type=int, default=512, help="lengths are drawn in [1, this]")
    p.add_argument("--reps", type=int, default=3, help="steady-state calls per length")
    p.add_argument("--backends", default=DEFAULT_BACKENDS,
                   help="comma list, as benchmarks.run takes; eager always runs first")  # fmt: skip
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--threads", type=int, help="torch CPU threads; default 1 on cpu")
    p.add_argument("--seed", type=int, default=SEED, help="draws the sequence lengths")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", type=Path, help="write the printed report here too")
    args = p.parse_args(argv)
    for option in ("lengths", "train_lengths"):
        count = getattr(args, option)
        if not 1 <= count <= args.max_length:
            p.error(f"--{option.replace('_', '-')} {count}: give 1 to --max-length "
                    f"({args.max_length}) distinct lengths")  # fmt: skip
    if args.reps < 1:
        p.error(f"--reps {args.reps}: give at least 1")
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown or not args.cases:
        p.error(
            f"--cases: unknown {', '.join(unknown) or '(none given)'}; cases: {', '.join(CASES)}"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    reason = MODELS[MODEL].unavailable_reason()
    if reason:
        p.error(f"{MODEL} {reason}: pip install -e '.[models]'")
    return args


def pay_startup(variants: list[Variant], device: torch.device, directory: Path) -> None:
    """Each compiler's one-time process start-up (imports, toolchain checks), before timing.

    A failure here is left to show where it counts: in that backend's results.
    """
    for variant in variants:
        try:
            with compiler_caches(directory):
                per_call_overhead_us(variant, device, calls=1)
        except Exception:
            pass


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    cuda = args.device == "cuda"
    if cuda:
        torch.set_float32_matmul_precision("high")
    else:
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    # One CPU thread by default, as benchmarks.run: stable on a small shared host.
    threads = args.threads or (None if cuda else 1)
    if threads:
        torch.set_num_threads(threads)
    device = torch.device(args.device)
    size = args.size or ("large" if cuda else "small")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    variants = select_variants(args.backends, args.device, discover_kiln_backends(args.device))
    rng = random.Random(args.seed)
    counts = {"inference": args.lengths, "training": args.train_lengths}
    lengths = {case: draw_lengths(counts[case], args.max_length, rng) for case in CASES}
    lengths = {case: lengths[case] for case in args.cases}
    model = on_device(Built(build_model(size, args.max_length), ()), device, dtype).module
    batch, vocab = SHAPES[size].batch, model.model.config.vocab_size
    tokens = {
        n: random_tokens(vocab, (batch, n), seed=SEED + n).to(device)
        for n in sorted({n for case in args.cases for n in lengths[case]})
    }
    meta = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": sys.argv if argv is None else argv, "device": args.device,
        "where": torch.cuda.get_device_name(0) if cuda
        else f"{os.cpu_count()} CPUs, {torch.get_num_threads()} thread(s)",
        "size": size, "dtype": str(dtype), "batch": batch, "max_length": args.max_length,
        "seed": args.seed, "reps": args.reps, "cases": args.cases, "lengths": lengths,
        "backends": [v.label for v in variants], "torch": torch.__version__,
    }  # fmt: skip
    cache_root = Path(tempfile.mkdtemp(prefix="torchkiln-dynamic-"))
    results: list[Result] = []
    try:
        pay_startup(variants, device, cache_root / "startup")
        for case in args.cases:
            swept = []
            for variant in variants:
                result = Result(variant.label, case, lengths[case])
                results.append(result)
                try:
                    with compiler_caches(cache_dir_for(cache_root, MODEL, case, variant)):
                        step = sweep(variant, case, copy.deepcopy(model), tokens, result)
                    swept.append((result, step))
                except Exception as e:
                    result.error = describe_error("sweep", e)
            steady_state(swept, tokens, args.reps, device)
            for result in results[-len(variants) :]:
                print(f"[dynamic] {case} {result.backend}: {result.status} {result.error}",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    relate(results)
    meta["wall_s"] = time.monotonic() - started
    text = render(meta, results)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        document = {"meta": meta, "results": [asdict(r) for r in results],
                    "targets": target_lines(results)}  # fmt: skip
        args.json.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
