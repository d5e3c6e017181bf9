"""Why tuned chain kernels were slower: per task, the default schedule's and the records' best time."""

import logging

import torch

import torchkiln
import torchkiln_tvm.tuning as tuning
from benchmarks.models import chain

logging.basicConfig()
logging.getLogger("torchkiln.tvm").setLevel(logging.DEBUG)
original_baseline, original_best = tuning.baseline, tuning.best_seconds


def baseline(task, database, runner):
    seconds = original_baseline(task, database, runner)
    print("baseline", task.task_name, seconds, flush=True)
    return seconds


def best_seconds(database, task):
    seconds = original_best(database, task)
    print("best", task.task_name, seconds, flush=True)
    return seconds


tuning.baseline, tuning.best_seconds = baseline, best_seconds
built = chain.build("large")
model = built.module.to("cuda", torch.bfloat16).eval()
args = [a.to("cuda", torch.bfloat16) for a in built.inputs]
with torch.no_grad():
    for options in ({}, {"tuning_trials": 2000, "tuning_time_budget_s": 60}):
        torchkiln.reset()
        compiled = torchkiln.compile(model, backend="tvm", options=options)
        compiled(*args)
        torch.cuda.synchronize()
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                compiled(*args)
            torch.cuda.synchronize()
        print(options)
        print(
            prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=8, max_name_column_width=60
            )
        )
