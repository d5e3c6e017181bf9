"""MetaSchedule's builder and runner: each candidate built and timed in a worker process.

MetaSchedule's own ``LocalBuilder`` and ``LocalRunner`` use pools of Python processes
that need ``cloudpickle`` and pass each kernel as a tar file a C compiler links. Here the
builder only serializes the candidate (``tvm.ir.save_json``); one worker process
(``python -m torchkiln_tvm.measure``) builds it with ``tvm.tirx.build`` and times it with
``time_evaluator``. The parent waits for each answer at most ``timeout_s`` seconds and
never past the tuning's deadline: a candidate whose build or run hangs costs its timeout
(the worker is killed and started again), not the compile, and the budget holds inside a
round as well as between rounds.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
import uuid

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerResult
from tvm.s_tir.meta_schedule.runner.runner import PyRunnerFuture

log = logging.getLogger("torchkiln.tvm")

#: How each candidate is timed: the mean of ``number`` runs, at least ``min_repeat_ms``.
EVALUATOR = {"number": 3, "repeat": 1, "min_repeat_ms": 20, "enable_cpu_cache_flush": False}


class Deadline:
    """When the tuning must stop (``None``: only when its trials are done)."""

    def __init__(self, seconds: float | None):
        self.start = time.monotonic()
        self.at = None if seconds is None else self.start + seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return float("inf") if self.at is None else self.at - time.monotonic()


#: The worker's command line (tests put a worker that hangs or fails in its place).
WORKER_COMMAND = [sys.executable, "-m", "torchkiln_tvm.measure"]


class Worker:
    """The process that builds and times candidates; started again after a timeout."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        """Start it now (importing TVM takes seconds: the search runs meanwhile)."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                WORKER_COMMAND,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def measure(self, request: dict, timeout_s: float) -> tuple[list[float] | None, str | None]:
        """``(seconds of each repeat, None)``, or ``(None, why)`` when the candidate did not
        build or run, or took more than ``timeout_s`` (then the worker is started again)."""
        self.start()
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout_s, 0))
            answer = json.loads(self.proc.stdout.readline()) if ready else None
        except (OSError, ValueError):  # a broken pipe, or half an answer: it died
            ready, answer = True, None
        if answer is None:
            why = (
                f"the measuring process died (exit code {self.proc.poll()})"
                if ready
                else f"timed out after {timeout_s:.1f} s"
            )
            self.stop()
            self.restarts += 1
            return None, why
        return answer.get("seconds"), answer.get("error")

    def warm_up(self, target: str, timeout_s: float) -> None:
        """Have the worker import TVM and open ``target``'s device (a CUDA context: seconds)
        before the first candidate, whose timeout would otherwise pay for it: the default
        schedule, measured first, then failed and tuning replaced it with slower ones."""
        _, error = self.measure({"warm_up": target}, timeout_s)
        if error is not None:
            log.warning("tvm: the tuning worker did not start: %s", error)


@derived_object
class SerializingBuilder(PyBuilder):
    """Keeps each candidate's module as JSON for the runner (the worker builds it)."""

    def __init__(self):
        super().__init__()
        self.pending: dict[str, str] = {}

    def build(self, build_inputs: list) -> list[BuilderResult]:
        results = []
        for one in build_inputs:
            key = uuid.uuid4().hex
            self.pending[key] = json.dumps(
                {"mod": tvm.ir.save_json(one.mod), "target": str(one.target)}
            )
            results.append(BuilderResult(key, None))
        return results


@derived_object
class _Done(PyRunnerFuture):
    def __init__(self, result: RunnerResult):
        super().__init__()
        self.value = result

    def done(self) -> bool:
        return True

    def result(self) -> RunnerResult:
        return self.value


@derived_object
class WorkerRunner(PyRunner):
    """Builds and times each candidate in :class:`Worker`, within a timeout and the deadline.

    Counts the candidates it measured (``trials``), those that failed (``failures``) and
    the seconds it waited for the worker (``busy_s``).
    """

    def __init__(self, builder: SerializingBuilder, deadline: Deadline, timeout_s: float):
        super().__init__()
        self.builder = builder
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.worker = Worker()
        self.trials = 0
        self.failures = 0
        self.busy_s = 0.0
        self.last_error: str | None = None

    def run(self, runner_inputs: list) -> list[_Done]:
        return [_Done(self._run(one)) for one in runner_inputs]

    def _run(self, one) -> RunnerResult:
        candidate = json.loads(self.builder.pending.pop(one.artifact_path))
        left = self.deadline.left()
        if left <= 0:
            return RunnerResult(None, "the tuning's time budget is spent")
        self.trials += 1
        request = {**candidate, "args": [a.as_json() for a in one.args_info]}
        started = time.monotonic()
        seconds, error = self.worker.measure(request, min(self.timeout_s, left))
        self.busy_s += time.monotonic() - started
        if error is not None:
            self.failures += 1
            self.last_error = error
            return RunnerResult(None, error)
        return RunnerResult(seconds, None)


def device_of(target: tvm.target.Target) -> tvm.runtime.Device:
    return tvm.cpu(0) if target.kind.name == "llvm" else tvm.device(target.kind.name, 0)


def _serve() -> None:
    """The worker's loop: one JSON request a line on stdin, one answer a line on stdout."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what TVM or LLVM print goes to stderr, not into the answers
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common, run_evaluator_common
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    evaluator = EvaluatorConfig(**EVALUATOR)
    fill = tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")
    for line in sys.stdin:
        request = json.loads(line)
        if "warm_up" in request:
            tvm.runtime.empty((1,), device=device_of(tvm.target.Target(request["warm_up"])))
            out.write(json.dumps({"seconds": []}) + "\n")
            out.flush()
            continue
        try:
            target = tvm.target.Target(request["target"])
            mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(
                tvm.ir.load_json(request["mod"])
            )
            kernel = tvm.tirx.build(mod, target=target)
            device = device_of(target)
            args = alloc_argument_common(fill, device, request["args"], 1)
            start = time.monotonic()
            seconds = run_evaluator_common(kernel, device, evaluator, args)
            answer = {"seconds": [float(s) for s in seconds], "wall": time.monotonic() - start}
        except Exception as e:  # a candidate that fails to build or run is a failed trial
            answer = {"error": f"{type(e).__name__}: {str(e)[:2000]}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve()
