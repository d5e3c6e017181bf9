"""Every hook a torchkiln plugin may implement.

A plugin author learns the whole contract from this file: implement the
functions below with ``@torchkiln.plugin.hookimpl`` in a module and name that
module in the ``torchkiln.backends`` entry-point group.
"""

from __future__ import annotations

from torchkiln.plugin import Backend, RuntimeWrapper, hookspec


@hookspec
def torchkiln_backends() -> list[Backend]:
    """Return the backends this plugin provides.

    Called once per plugin, the first time anything asks for the list of
    backends or for a backend by name. Return a list of
    :class:`torchkiln.plugin.Backend` records; an empty list is fine (for
    example when the plugin only works on another platform). Do not import
    heavy dependencies here: do it inside the backend's compile function.

    A backend that runs only some ops sets ``capabilities=`` (see
    :class:`torchkiln.plugin.Capabilities`); the core then partitions every graph
    and never asks the plugin for a partitioner of its own::

        Backend("mine", capabilities=lambda: Capabilities(
            compile_partition=compile_aten_graph,
            ops={torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor},
        ))
    """


@hookspec
def torchkiln_runtime_wrappers() -> list[RuntimeWrapper]:
    """Return the runtime wrappers this plugin provides.

    A runtime wrapper (CUDA graphs, say) goes around the graphs *any* backend
    compiled, when ``compile(mode=...)`` names one of its ``modes`` or a
    backend option with ``runtime_wrapper=`` set to its name is true: see
    :class:`torchkiln.plugin.RuntimeWrapper`. Called once per plugin, with the
    backends. Wrapper names are unique across plugins; a plugin never imports
    another plugin, it names the wrapper it wants.
    """
