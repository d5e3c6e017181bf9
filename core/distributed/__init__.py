"""torchkiln under ``torch.distributed``: compiled modules inside DDP and FSDP2, DDP's graph split.

- ``ddp``: ``torchkiln.compile(DDP(model))`` runs DDP's own forward logic eagerly (its
  pre-forward, reducer preparation and hooks) around the compiled inner module.
- ``bucket_split``: a graph captured inside a DDP forward is split where DDP's gradient
  buckets fill up, so each bucket's all-reduce starts while earlier layers' backward runs.
"""

from torchkiln.distributed.bucket_split import active_ddp, bucketed
from torchkiln.distributed.ddp import CompiledDDP, is_ddp

__all__ = ["CompiledDDP", "active_ddp", "bucketed", "is_ddp"]
