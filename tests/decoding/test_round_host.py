"""The decoding round's one host copy (``bench.rounds.to_host``): every tensor comes back with
the values its own ``tolist`` gives, integers as ints, rows as lists, whatever their dtypes."""

import torch

from bench.rounds import to_host as _to_host
from bench.tree_round import tree_depth as _tree_depth


def test_one_copy_gives_each_tensors_own_values():
    g = torch.Generator().manual_seed(0)
    parts = {
        "ids": torch.randint(-1, 2**40, (3, 5), generator=g),  # token ids, -1 padding, big ids
        "counts": torch.tensor([0, 5, 2]),
        "empty": torch.zeros(3, 0, dtype=torch.long),  # a round that drafted nothing
        "logp": torch.randn(3, 6, generator=g).log_softmax(-1),  # float32
        "sums": torch.rand(2, 2, 4, generator=g),  # [rows, (expected acceptance, bias), positions]
        "half": torch.rand(3, generator=g).half(),
        "brain": torch.rand(3, 2, generator=g).bfloat16(),
        "double": torch.rand(2, generator=g, dtype=torch.float64),
    }
    got = _to_host(parts)
    assert list(got) == list(parts)
    for name, t in parts.items():
        want = t.flatten(1).tolist() if t.dim() > 1 else t.tolist()
        assert got[name] == want, name
        leaves = [v for row in got[name] for v in (row if t.dim() > 1 else [row])]
        assert all(type(v) is (float if t.is_floating_point() else int) for v in leaves), name
    assert got["empty"] == [[], [], []]


def test_a_trees_depth_counts_levels_below_the_root():
    assert _tree_depth([]) == 0
    assert _tree_depth([-1, -1]) == 1  # two children of the root
    assert _tree_depth([-1, 0, 1, -1, 3]) == 3  # a chain of three beside one of two
