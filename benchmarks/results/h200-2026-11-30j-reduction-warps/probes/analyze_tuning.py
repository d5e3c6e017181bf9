"""What light tuning saved, from the logs in this folder.

    python analyze_tuning.py

tune-store-old-heuristic.json: the stored winners of the first run (the old heuristic, every
reduction tuned over the heuristic, half the warps, a halved loop block and XBLOCK); the
heuristic is the candidate no other exceeds in any setting. tune-log-new-heuristic.json: the
second run (half the warps by default; twice and half the warps, halved blocks), with each
kernel's iteration space.
"""

import collections
import json
import pathlib

HERE = pathlib.Path(__file__).parent


def parse(name: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in name.split(","))}


def change(heuristic: dict, other: dict) -> str:
    """Which setting ``other`` changes: 'warps-'/'warps+', a block's name, or 'heuristic'."""
    changed = [k for k in heuristic if heuristic[k] != other[k]]
    if changed == ["warps"]:
        return "warps-" if other["warps"] < heuristic["warps"] else "warps+"
    return ",".join(changed) or "heuristic"


def old_store() -> None:
    entries = json.loads((HERE / "tune-store-old-heuristic.json").read_text())
    won, saved, total = collections.Counter(), collections.Counter(), 0.0
    for e in entries:
        times = e["timings"]
        configs = {n: parse(n) for n in times}
        (heur,) = [
            n
            for n, p in configs.items()
            if all(p[k] >= max(q[k] for q in configs.values()) for k in p)
        ]
        best = min(times, key=times.get)
        kind = change(configs[heur], configs[best])
        won[kind] += 1
        saved[kind] += times[heur] - times[best]
        total += times[heur]
    print(f"old heuristic: {len(entries)} kernels, {total:.3f} ms at the heuristic")
    for kind, n in won.most_common():
        print(f"  best {kind:10s} {n:4d} kernels, saves {saved[kind]:.4f} ms")


def new_log() -> None:
    log = json.loads((HERE / "tune-log-new-heuristic.json").read_text())
    rows = []
    for e in log:
        heur = ",".join(f"{k}={v}" for k, v in e["meta"].items()) + f",warps={e['warps']}"
        times = e["timings"]
        best = min(times, key=times.get)
        rows.append((e["elements"], times[heur], times[best], change(parse(heur), parse(best))))
    total = sum(r[1] for r in rows)
    print(f"new heuristic: {len(rows)} kernels, {total:.3f} ms at the heuristic")
    for low in (0, 2**22, 2**23, 2**24):
        big = [r for r in rows if r[0] >= low]
        saved = sum(r[1] - r[2] for r in big)
        size = f">= 2**{low.bit_length() - 1}" if low else "any number of"
        print(f"  kernels of {size} elements: {len(big):3d}, save {saved:.4f} ms")
    big = collections.Counter(r[3] for r in rows if r[0] >= 2**23)
    print("  best among kernels of >= 2**23 elements:", dict(big))


old_store()
new_log()
