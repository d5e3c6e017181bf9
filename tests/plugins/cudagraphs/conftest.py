"""Float32 at float32's precision in the cudagraphs tests.

cuDNN convolutions may run in TF32 by default (``torch.backends.cudnn.allow_tf32``), whose
rounding (1e-3 relative) differs between the algorithms cuDNN picks inside and outside a
CUDA graph capture: gradients that are zero up to rounding (a convolution's bias before a
batch norm) then differ from eager's by more than float32's tolerance.
"""

import pytest
import torch


@pytest.fixture(autouse=True)
def float32_convolutions():
    allowed = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = allowed
