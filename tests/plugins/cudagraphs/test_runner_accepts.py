"""``Recording.accepts``'s comparison (``capture._Expected``), which needs no GPU: a call
whose arguments it lets through replays the recording without the signature's checks."""

from __future__ import annotations

import torch

from torchkiln_cudagraphs.capture import _Expected


def recorded_args() -> list:
    return [torch.randn(4, 4), torch.randn(4), torch.randn(2, 3), 7]


def expected_of(args: list, copied: set[int]) -> _Expected:
    addresses = [a.data_ptr() if isinstance(a, torch.Tensor) else 0 for a in args]
    return _Expected(args, copied, addresses)


def test_the_recorded_arguments_and_new_values_of_a_copied_input_are_accepted():
    args = recorded_args()
    expected = expected_of(args, copied={2})
    assert expected.matches(args)
    assert expected.matches([args[0], args[1], torch.randn(2, 3), 7])


def test_anything_the_recording_depends_on_sends_the_call_to_the_full_checks():
    args = recorded_args()
    expected = expected_of(args, copied={2})
    moved = torch.randn(4, 4)  # an input read in place, now at another address
    resized = args[1].view(2, 2)  # same address, other sizes
    transposed = torch.randn(3, 2).t()  # a copied input of another layout
    assert not expected.matches([moved, *args[1:]])
    assert not expected.matches([args[0], resized, *args[2:]])
    assert not expected.matches([*args[:2], transposed, 7])
    assert not expected.matches([*args[:2], args[2].double(), 7])
    assert not expected.matches([*args[:3], 8])
    assert not expected.matches([*args[:3], 7.0])
    assert not expected.matches(args[:3])
    assert not expected.matches([*args[:3], torch.tensor(7)])
