"""The conformance kit's fast checks against every bundled backend (slow ones: ``-m kiln_slow``).

Known failures are listed here with their reason: each is a strict xfail, reported by the
kit and turning the run red once fixed, until its entry goes.
"""

import pytest

from torchkiln.registry import backend_status, lookup_backend
from torchkiln.testing import kit_params

KNOWN_FAILURES = {
    "eager": {},
    "aot_eager": {},
    "inductor": {},
    "onnxrt": {},
    "openvino": {},
    "tvm": {},
}


def _params():
    for backend, known in KNOWN_FAILURES.items():
        status = backend_status(lookup_backend(backend))
        if status.usable:
            yield from kit_params(backend, xfail=known)
        else:
            yield pytest.param(
                None, id=f"{backend}:unavailable", marks=pytest.mark.skip(reason=status.reason)
            )


@pytest.mark.parametrize("check", list(_params()))
def test_backend_conforms(check):
    check.run()
