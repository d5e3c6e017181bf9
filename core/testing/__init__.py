"""The conformance kit: what every backend, bundled or third-party, must do like eager.

Run it against a registered backend, from any directory::

    pytest -p torchkiln.testing --kiln-backend NAME            # the fast checks
    pytest -p torchkiln.testing --kiln-backend NAME --kiln-all # every check
    pytest -p torchkiln.testing --kiln-backend NAME -m kiln_slow

or parametrize a backend package's own tests with it (``kit_params``). Each check
compares the backend with eager PyTorch on fresh random inputs: OpInfo samples of
common ops (float32 and the ``dtypes`` the backend declares) and their gradients
(float32), small models in inference and training, mutated inputs, multiple and aliasing outputs,
non-contiguous inputs, scalars, the declared options and modes, the
missing-dependency message, and results that stay intact across calls. The run
ends with a report: what passed, what the core partitioned away from the backend
(``Backend.capabilities``), what failed.
"""

from torchkiln.testing.kit import FAST_OPS, SLOW_MARKER, Check, checks, kit_params
from torchkiln.testing.pytest_plugin import (
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)

__all__ = [
    "FAST_OPS",
    "SLOW_MARKER",
    "Check",
    "checks",
    "kit_params",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_runtest_call",
    "pytest_runtest_makereport",
    "pytest_terminal_summary",
]
