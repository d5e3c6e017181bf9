"""Experiment only: turn cuDNN's SDPA backend off in every process started with this folder
on PYTHONPATH (after running any sitecustomize this one shadows)."""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _candidate = os.path.join(os.path.abspath(_entry or "."), "sitecustomize.py")
    if os.path.dirname(_candidate) != _here and os.path.isfile(_candidate):
        with open(_candidate) as _f:
            exec(
                compile(_f.read(), _candidate, "exec"),
                {"__name__": "_sitecustomize", "__file__": _candidate},
            )
        break
import torch  # noqa: E402

torch.backends.cuda.enable_cudnn_sdp(False)
