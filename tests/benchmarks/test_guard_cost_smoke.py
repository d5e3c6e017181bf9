"""``benchmarks.guard_cost`` still runs: it finds the entry a call passes and times it."""

import re

import torch

from benchmarks import guard_cost


def test_it_times_the_guard_of_the_entry_a_call_passes(capsys):
    guard_cost.measure("mlp", "tiny", torch.device("cpu"), repeat=1)
    out = capsys.readouterr().out
    assert re.search(r"mlp: entry of forward: \d+ checks, [\d.]+ us", out), out
    assert re.search(r"mlp: eager \d+ us, kiln:eager \d+ us", out), out
