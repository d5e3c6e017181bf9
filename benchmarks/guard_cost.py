"""What the capture's guard functions cost a warm call (issue #18 item 4).

For each model of the zoo compiled with ``backend="eager"`` (capture, no compiler), the
guard function of each cache entry is timed alone on the arguments a real call passes
it, beside the whole warm call and eager's call::

    python -m benchmarks.guard_cost --models convnet,hf_gpt2,hf_bert --size tiny
    python -m benchmarks.guard_cost --device cuda --size large --models tv_resnet18,hf_gpt2

Prints one line per entry (checks, µs a call, ns a check) and one per model (eager,
compiled, their ratio); each figure is the fastest of ``--repeat`` samples.
"""

from __future__ import annotations

import argparse
import timeit

import torch

import torchkiln
from benchmarks.measure import synchronize
from benchmarks.models import MODELS
from torchkiln.capture import dispatch


def guard_calls(compiled, inputs) -> list[tuple]:
    """``(code name, entry, args)`` for each cache entry a call of ``compiled`` passes:
    the guard functions are swapped for spies for one call."""
    seen: list[tuple] = []
    swapped = []
    for cache in dispatch._caches.values():
        for cfg, entries in cache.by_config.items():
            for i, (guard, run) in enumerate(entries):
                entry = next(e for e in cache.details[cfg] if e.guard is guard)
                spy = lambda *a, _g=guard, _e=entry, _n=cache.code.co_name: (  # noqa: E731
                    seen.append((_n, _e, a)) or _g(*a)
                )
                entries[i] = (spy, run)
                swapped.append((entries, i, guard, run))
    compiled(*inputs)
    for entries, i, guard, run in swapped:
        entries[i] = (guard, run)
    return seen


def fastest_us(fn, number: int, repeat: int, device: torch.device) -> float:
    def timed():
        fn()
        synchronize(device)

    return min(timeit.repeat(timed, number=number, repeat=repeat)) / number * 1e6


def measure(name: str, size: str, device: torch.device, repeat: int) -> None:
    torchkiln.reset()
    built = MODELS[name].build(size)
    model = built.module.to(device).eval()
    inputs = [x.to(device) for x in built.inputs]
    compiled = torchkiln.compile(model, backend="eager")
    with torch.no_grad():
        compiled(*inputs)
        for code_name, entry, args in guard_calls(compiled, inputs):
            checks = len(entry.guard_descriptions)
            guard_us = fastest_us(
                lambda g=entry.guard, a=args: g(*a), 500, repeat, torch.device("cpu")
            )
            print(
                f"{name}: entry of {code_name}: {checks} checks, {guard_us:.1f} us "
                f"({guard_us * 1e3 / max(checks, 1):.0f} ns a check)"
            )
        eager = fastest_us(lambda: model(*inputs), 20, repeat, device)
        kiln = fastest_us(lambda: compiled(*inputs), 20, repeat, device)
    print(f"{name}: eager {eager:.0f} us, kiln:eager {kiln:.0f} us, eager/kiln {eager / kiln:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="convnet,hf_gpt2,hf_bert")
    parser.add_argument("--size", default="tiny", choices=("tiny", "small", "large"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.models.split(","):
        measure(name, args.size, torch.device(args.device), args.repeat)


if __name__ == "__main__":
    main()
