"""Per-phase times of a training step: eager vs kiln:openvino (and per compiled graph).

    PYTHONPATH=. .venv/bin/python benchmarks/results/cpu-2026-12-02-openvino/profile/phases.py \
        mlp,nanogpt,chain,convnet,hf_gpt2,hf_bert,hf_llama,timm_vit [backend]
"""

import os
import tempfile

os.environ["TORCHKILN_CACHE_DIR"] = tempfile.mkdtemp()
import collections
import copy
import statistics
import sys
import time

import torch

torch.set_num_threads(1)
import torchkiln  # noqa: E402
from benchmarks.cases import loss_of  # noqa: E402
from benchmarks.models import MODELS  # noqa: E402
from torchkiln_openvino import choice, runtime  # noqa: E402

GRAPH_T = collections.defaultdict(list)
INFER_T = collections.defaultdict(list)
orig_call = choice.MeasuredChoice.__call__
orig_boxed = choice.MeasuredChoice.call_boxed
orig_ov = runtime.OpenVINOGraph.__call__
ids = {}
GRAPH_OBJ = []


def gid(o):
    if isinstance(o, choice.MeasuredChoice) and id(o) not in ids:
        GRAPH_OBJ.append(o)
    return ids.setdefault(id(o), len(ids))


def timed_call(self, *a):
    t = time.perf_counter()
    r = orig_call(self, *a)
    GRAPH_T[gid(self)].append(time.perf_counter() - t)
    return r


def timed_boxed(self, a):
    if self.chosen is not self.torch:
        return timed_call(self, *a)
    t = time.perf_counter()
    r = orig_boxed(self, a)
    GRAPH_T[gid(self)].append(time.perf_counter() - t)
    return r


def timed_ov(self, *a):
    t = time.perf_counter()
    r = orig_ov(self, *a)
    INFER_T[gid(self)].append(time.perf_counter() - t)
    return r


choice.MeasuredChoice.__call__ = timed_call
choice.MeasuredChoice.call_boxed = timed_boxed
runtime.OpenVINOGraph.__call__ = timed_ov
real_infer = None


def phases(fwd, module, inputs, steps):
    params = list(module.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    out = collections.defaultdict(list)
    for _s in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(fwd(*inputs))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        out["fw"].append(t1 - t0)
        out["bw"].append(t2 - t1)
        out["opt"].append(t3 - t2)
    return out


def med(x):
    return statistics.median(x) * 1e3


for name in sys.argv[1].split(","):
    built = MODELS[name].build("small")
    m_e = copy.deepcopy(built.module).train()
    m_k = copy.deepcopy(built.module).train()
    backend = sys.argv[2] if len(sys.argv) > 2 else "openvino"
    comp = torchkiln.compile(m_k, backend=backend)
    GRAPH_T.clear()
    INFER_T.clear()
    phases(comp, m_k, built.inputs, 5)
    phases(m_e, m_e, built.inputs, 5)
    GRAPH_T.clear()
    INFER_T.clear()
    E = collections.defaultdict(list)
    K = collections.defaultdict(list)
    for _r in range(15):
        for k, v in phases(m_e, m_e, built.inputs, 1).items():
            E[k] += v
        for k, v in phases(comp, m_k, built.inputs, 1).items():
            K[k] += v

    def tot(d):
        return [a + b + c for a, b, c in zip(d["fw"], d["bw"], d["opt"])]

    print(
        f"{name}: eager fw {med(E['fw']):.2f} bw {med(E['bw']):.2f} opt {med(E['opt']):.2f} tot {med(tot(E)):.2f} | "
        f"kiln fw {med(K['fw']):.2f} bw {med(K['bw']):.2f} opt {med(K['opt']):.2f} tot {med(tot(K)):.2f} | x{med(tot(E)) / med(tot(K)):.3f}"
    )
    for g, ts in GRAPH_T.items():
        obj = [o for o in ids if ids[o] == g]
        mc = next(o for o in GRAPH_OBJ if gid(o) == g)
        kind = "torch" if mc.chosen is mc.torch else "ov"
        print(
            f"   graph {g} [{kind}] {choice._summary(mc.torch.gm)[:60]}: {med(ts):.3f} ms x{len(ts) // 15}/step  ov-call {med(INFER_T[gid(mc.openvino)]) if gid(mc.openvino) in INFER_T else float('nan'):.3f}"
        )
    sys.stdout.flush()
