"""Entry point of the openvino backend plugin.

The converter is not built yet: the backend is registered (so that it is
listed, with its extra, and can be selected) and compiling with it raises
``NotImplementedYet``, which ``torchkiln.config.suppress_errors`` turns into
an eager fallback.
"""

from __future__ import annotations

from torchkiln.exc import NotImplementedYet
from torchkiln.plugin import Backend, Requirement, hookimpl


def compile_graph(gm, example_inputs, **options):
    raise NotImplementedYet(
        "the openvino backend's converter is not implemented yet; "
        "use backend='inductor' or backend='aot_eager' meanwhile"
    )


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            name="openvino",
            compile_fn=compile_graph,
            description="compiles the graph with OpenVINO (FX -> OpenVINO model -> compiled model) [not implemented yet]",
            requires=(Requirement("openvino", extra="openvino"),),
        )
    ]
