"""Load the conformance kit's pytest plugin (its report, its ``kiln_slow`` marker) for these tests.

A ``pytest -p torchkiln.testing ...`` run has it already.
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("torchkiln.testing"):
        config.pluginmanager.import_plugin("torchkiln.testing")
