"""Entry point of the openvino backend plugin: FX → OpenVINO model → compiled model.

Graphs go through ``torchkiln.aot.aot_autograd``: forward, backward and inference aten
graphs are each converted by OpenVINO's PyTorch frontend and compiled with
``compile_model``. The backend declares its capabilities (the ops the frontend
converts): the core partitions each graph, and what OpenVINO can't convert (pooling
backward, grouped convolutions' backward, ...) runs with the next backend of the chain
(``backend=["openvino", "inductor"]``; eager when openvino is named alone). A graph that
torch runs faster than OpenVINO on its first call runs in torch from then on
(:mod:`torchkiln_openvino.choice`, the ``torch_when_faster`` option).
"""

from __future__ import annotations

from torchkiln.plugin import Backend, Capabilities, Option, Requirement, hookimpl

OPTIONS = (
    Option(
        "device",
        "CPU",
        "the OpenVINO device to compile for: 'CPU', 'GPU' (an Intel GPU) or 'AUTO'",
        type=str,
        choices=("CPU", "GPU", "AUTO"),
    ),
    Option(
        "precision",
        "f32",
        "OpenVINO's inference precision: 'f32' matches eager on float32 graphs (float16 "
        "and bfloat16 ones round otherwise than eager: see the plugin's README); 'bf16' and "
        "'f16' are faster where the CPU has them, at their precision",
        type=str,
        choices=("f32", "bf16", "f16"),
    ),
    Option(
        "num_threads",
        None,
        "threads OpenVINO runs a graph on; default: torch.get_num_threads()",
        type=(int, type(None)),
        minimum=1,
    ),
    Option(
        "cache_dir",
        None,
        "a folder for OpenVINO's own cache of compiled models (its CACHE_DIR): a later "
        "process compiling the same graph loads it from there; default: none",
        type=(str, type(None)),
    ),
    Option(
        "freeze_weights",
        False,
        "inference graphs only (no_grad, or no input requiring grad): fold parameters and "
        "buffers into the OpenVINO model as constants, compiled on the first call and again "
        "when a weight is replaced or written in place (not through param.data); training "
        "graphs take weights as inputs",
        type=bool,
    ),
    Option(
        "disabled_ops",
        (),
        "aten ops never run by OpenVINO (e.g. ['aten.gelu.default', 'aten.softmax']): "
        "the next backend of the chain runs them",
        type=(tuple, list),
    ),
    Option(
        "torch_when_faster",
        True,
        "time each graph's OpenVINO model against torch running the same aten graph on its "
        "first call, and keep the faster for good; False: OpenVINO runs every graph it converts",
        type=bool,
    ),
)


def capabilities() -> Capabilities:
    """The ops OpenVINO's frontend converts (called on the first compile: imports openvino)."""
    from torchkiln_openvino import cache, ops
    from torchkiln_openvino.choice import compile_partition
    from torchkiln_openvino.compiler import check_options, decompositions

    return ops.capabilities(compile_partition, decompositions, check_options, cache.codec())


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            name="openvino",
            description="compiles the graph with OpenVINO (FX -> OpenVINO model -> compiled model)",
            requires=(Requirement("openvino", extra="openvino"),),
            options=OPTIONS,
            capabilities=capabilities,
        )
    ]
