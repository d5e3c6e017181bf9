"""The shared AOT-autograd layer: compiled training for any backend.

A backend that wants forward *and* backward graphs wraps its graph compiler::

    import torch
    from torchkiln.aot import aot_autograd, default_decompositions, min_cut_partition

    def my_compiler(gm, example_inputs):       # gm: functional aten graph
        return gm.forward                        # or anything callable the same way

    compile_fn = aot_autograd(
        fw_compiler=my_compiler,                 # forward graph of a training call
        bw_compiler=my_compiler,                 # backward graph (default: fw_compiler)
        inference_compiler=my_compiler,          # no input requires grad / grad mode off
                                                 # (default: fw_compiler)
        decompositions=default_decompositions(keep=(torch.ops.aten.gelu.default,)),
        partition_fn=min_cut_partition,          # default; or simple_partition
    )
    # compile_fn(gm, example_inputs) -> callable, the backend signature

The convention every compiler gets, forward, backward and inference alike:

* ``compiler(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> callable``.
* ``gm`` is **functional** and at **aten level**: no in-place ops, no views of
  inputs that are written to, every node a ``torch.ops.aten`` (or prims)
  overload or ``operator.getitem`` on a multi-output one; its placeholders are flat tensors, its output a flat tuple of
  tensors. ``example_inputs`` are fake tensors (``FakeTensor``) with the
  placeholders' sizes, strides and dtypes: use them for metadata, never data.
* The callable is invoked as ``compiled(*flat_tensor_args)`` and returns a
  tuple or list of tensors in the order of ``gm``'s outputs.
* Forward graph: placeholders are the graph's inputs (parameters included);
  outputs are the new values of mutated inputs (the runtime copies them into
  the real inputs), then the user's tensor outputs that are not views of an
  input (the runtime rebuilds those as views), then the values saved for
  backward. An inference graph is the same without the saved values.
  ``gm.meta["num_user_outputs"]`` counts the outputs before the saved values:
  those must have the strides eager gives them, the saved values may have
  any (a compiler that keeps them in its own layout, channels-last say,
  avoids copying them back). An inference graph's placeholders of parameters
  and module buffers have ``meta["weight"] = True``: a compiler may fold them
  as constants if it checks, on each call, that they are the same tensors
  with the same ``_version``.
* Backward graph: placeholders are the saved values, then the incoming
  gradients (contiguous, one per forward output that requires grad);
  outputs are the gradients of the inputs that require grad, in input order
  (an input autograd gives no gradient is left out). It is compiled on the
  first backward call, and its ``example_inputs`` have the strides of that
  call's tensors: the saved values as the compiled forward produced them.
  With ``backward_ahead=True`` and staged compilers (``compiler.start(gm,
  example_inputs)`` returning a ``StartedCompile``: the code generated, its
  ``output_strides`` known, ``finish()`` waiting for the slow part), it is
  compiled with the forward for the strides the forward announced, and the
  first backward uses it if the saved values have them.
  A compiled backward with a ``call_boxed(args: list)`` method is called through
  it instead, with a list nobody else holds: it may empty the list and drop each
  saved value after its last use, so that the backward's peak memory is eager's
  (saved activations freed as the backward goes) rather than all of them at once.
  ``run_boxed`` is a compiler that runs fx graphs as they are, boxed.
* Graphs are traced with static shapes; random ops are neither decomposed by
  the default table nor recomputed, so a fixed seed gives eager's numbers.

``decompositions`` maps aten overloads to Python decompositions, as
``make_fx`` takes them; ``None`` means none (the graph keeps the ops the
dispatcher reaches). ``default_decompositions(keep=...)`` is the core-aten
table built from ``torch._decomp``; it returns a fresh dict to copy and extend.
``core_aten_table()`` is torch's core-aten table as backends that convert aten graphs
start from it. Whatever the table, ops in ``KEEP_WHOLE`` stay whole
(``keep_whole(table)``): their decompositions give wrong gradients.

A partitioner is ``partition_fn(joint_gm, num_fwd_outputs) -> (fw_gm, bw_gm)``:
``joint_gm`` has placeholders ``primals_*`` then ``tangents_*`` and outputs the
``num_fwd_outputs`` forward outputs followed by the input gradients (as in
the backward graph). ``fw_gm`` outputs the forward outputs then the saved
values; ``bw_gm`` takes the saved values (same order) then the tangents.
``partition_with_saved(joint_gm, num_fwd_outputs, saved_nodes)`` builds both
once a partitioner has chosen what to save. See :mod:`torchkiln.aot.partition`.

A backend that can store what its compilers return passes
``cache=ArtifactCodec(salt, dump, load)``: plans then go to the on-disk plan
cache and a later process that compiles the same graph loads them instead
of tracing and compiling again (see :mod:`torchkiln.aot.cache`).

A backend that rewrites the captured (torch-level) graph before it is traced passes
``graph_pass=fn``, ``fn(gm, fake_inputs) -> gm`` (inductor: explicit attention into SDPA
calls, whose backward autograd then gives): it runs when a plan is traced, never when
one is loaded from the plan cache, which keys plans by the graph as captured.

``TORCHKILN_LOGS=aot_graphs`` prints the joint, forward, backward and
inference graphs.
"""

from torchkiln.aot.api import aot_autograd
from torchkiln.aot.boxed import BoxedGraph, run_boxed
from torchkiln.aot.cache import ArtifactCodec
from torchkiln.aot.decompositions import (
    KEEP_WHOLE,
    core_aten_table,
    default_decompositions,
    keep_whole,
)
from torchkiln.aot.partition import (
    MaterializingMinCut,
    min_cut_partition,
    partition_with_saved,
    simple_partition,
)

__all__ = [
    "KEEP_WHOLE",
    "ArtifactCodec",
    "BoxedGraph",
    "MaterializingMinCut",
    "aot_autograd",
    "core_aten_table",
    "default_decompositions",
    "keep_whole",
    "min_cut_partition",
    "partition_with_saved",
    "run_boxed",
    "simple_partition",
]
