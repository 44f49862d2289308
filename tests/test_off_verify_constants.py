"""The 1-node verify tree's constant tensors, cached per device (``off_state._TrivialTreeConstants``)."""

import torch

from server_patch.off_state import _TrivialTreeConstants


def test_tree_constants_equal_what_a_fresh_tree_would_hold_at_every_size():
    consts = _TrivialTreeConstants()
    for bs in (1, 3, 64, 300, 7, 1024, 2):  # grows past its first capacity, then shrinks again
        index, next_token, next_sibling = consts.tree(bs, torch.device("cpu"))
        assert torch.equal(index, torch.arange(bs, dtype=torch.long).unsqueeze(1))
        assert torch.equal(next_token, torch.full((bs, 1), -1, dtype=torch.long))
        assert torch.equal(next_sibling, torch.full((bs, 1), -1, dtype=torch.long))


def test_the_mask_is_all_true_and_exactly_as_long_as_asked():
    consts = _TrivialTreeConstants()
    for n in (5, 70_000, 12, 200_000):
        mask = consts.all_true(n, torch.device("cpu"))
        assert mask.dtype == torch.bool and mask.shape == (n,) and bool(mask.all())


def test_buffers_are_made_once_while_the_size_fits():
    consts = _TrivialTreeConstants()
    first = consts.tree(10, torch.device("cpu"))[0]
    again = consts.tree(200, torch.device("cpu"))[0]
    assert first.data_ptr() == again.data_ptr()  # one buffer of 256 rows, sliced
    assert consts.all_true(10, torch.device("cpu")).data_ptr() == consts.all_true(60_000, torch.device("cpu")).data_ptr()
