"""Every hook a torchkiln plugin may implement.

A plugin author learns the whole contract from this file: implement the
functions below with ``@torchkiln.plugin.hookimpl`` in a module and name that
module in the ``torchkiln.backends`` entry-point group.
"""

from __future__ import annotations

from torchkiln.plugin import Backend, hookspec


@hookspec
def torchkiln_backends() -> list[Backend]:
    """Return the backends this plugin provides.

    Called once per plugin, the first time anything asks for the list of
    backends or for a backend by name. Return a list of
    :class:`torchkiln.plugin.Backend` records; an empty list is fine (for
    example when the plugin only works on another platform). Do not import
    heavy dependencies here: do it inside the backend's compile function.
    """
