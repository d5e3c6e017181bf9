"""Ad-hoc probe (twelfth session): GPT-2 (zoo, large, bf16) inference at 300 tokens after
lengths 15, 42, 64 (automatic dynamic shapes), kiln:inductor against torch.compile: step
time, GPU kernels, host time by function and by op. Run from the repository root on the
GPU machine with PYTHONPATH=.; output: gpt2-dynamic-host.txt."""

import torch, torchkiln, time, statistics as st, sys
from torch.profiler import profile, ProfilerActivity
from benchmarks.dynamic import build_model
torch.manual_seed(0)
results = {}
for label in ("kiln:inductor", "torch.compile"):
    module = build_model("large", 512).cuda().to(torch.bfloat16).eval()
    if label == "torch.compile":
        fwd = torch.compile(module)
    else:
        fwd = torchkiln.compile(module, backend="inductor", dynamic=False if label == "kiln:static" else None)
    with torch.no_grad():
        for T in (15, 42, 64):
            fwd(torch.randint(0, 1000, (16, T), device="cuda"))
        tok = torch.randint(0, 1000, (16, 300), device="cuda")
        for _ in range(3): fwd(tok)
        torch.cuda.synchronize()
        ts = []
        for _ in range(10):
            t = time.perf_counter(); fwd(tok); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            fwd(tok); torch.cuda.synchronize()
        import cProfile, pstats
        pr = cProfile.Profile(); pr.enable()
        for _ in range(10): fwd(tok)
        torch.cuda.synchronize(); pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(8)
        with profile(activities=[ProfilerActivity.CPU]) as pc:
            for _ in range(10): fwd(tok)
            torch.cuda.synchronize()
        print(pc.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))
    tot = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            a = tot.setdefault(e.name, [0.0, 0]); a[0] += e.device_time; a[1] += 1
    print(f"== {label}: step {st.median(ts)*1e3:.3f} ms, kernels {sum(v[0] for v in tot.values())/1e3:.3f} ms, {sum(v[1] for v in tot.values())} launches")
    for name, (us, n) in sorted(tot.items(), key=lambda kv: -kv[1][0])[:14]:
        print(f"  {us:9.1f} us x{n:3d} {name[:150]}")
    sys.stdout.flush()
