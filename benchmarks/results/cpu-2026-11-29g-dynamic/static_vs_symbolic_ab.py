"""In-process A/B: hf_gpt2 tiny inference, static (dynamic=False) vs symbolic (dynamic=True)
kernels vs eager, alternating, median of rounds; per length."""
import time, statistics, sys, torch, torchkiln
from benchmarks.dynamic import build_model
torch.set_num_threads(1)
m = build_model("tiny", 512).eval()
vocab = m.model.config.vocab_size
static = torchkiln.compile(m, dynamic=False)
symbolic = torchkiln.compile(m, dynamic=True)
def t(fn, x, n=5):
    best = []
    for _ in range(n):
        s = time.perf_counter(); fn(x); best.append(time.perf_counter() - s)
    return statistics.median(best)
with torch.no_grad():
    for T in [int(a) for a in sys.argv[1:]] or [64, 256, 500]:
        x = torch.randint(0, vocab, (2, T))
        for f in (static, symbolic, m): f(x); f(x)
        r = {"eager": [], "static": [], "symbolic": []}
        for _ in range(5):
            r["eager"].append(t(m, x)); r["static"].append(t(static, x)); r["symbolic"].append(t(symbolic, x))
        med = {k: statistics.median(v) * 1e3 for k, v in r.items()}
        print(f"T={T}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in med.items()))
