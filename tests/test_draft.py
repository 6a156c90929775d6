import torch
from hypothesis import given
from hypothesis import strategies as st

from ouroboros.loop.draft import CANDIDATE, PROBE, Draft, additive_mask, tree_attention


def brute_mask(parents, n_prefix):
    """Reference: query a sees key b iff b is a prefix token at or before a, or an ancestor-or-self node."""
    n = len(parents)
    q = n_prefix + n

    def anc(i):
        s = set()
        while i >= 0:
            s.add(i)
            i = parents[i]
        return s

    m = torch.zeros(q, q, dtype=torch.bool)
    for a in range(q):
        for b in range(q):
            if b < n_prefix:
                m[a, b] = a >= b
            elif a >= n_prefix:
                m[a, b] = (b - n_prefix) in anc(a - n_prefix)
    return m


@st.composite
def trees(draw, max_nodes=12):
    n = draw(st.integers(0, max_nodes))
    return [draw(st.integers(-1, i - 1)) for i in range(n)]


@given(trees(), st.integers(1, 4))
def test_mask_matches_brute_force(parents, n_prefix):
    assert torch.equal(tree_attention(parents, n_prefix), brute_mask(parents, n_prefix))


def test_golden_tree():
    d = Draft()
    assert d.add_path([5, 1]) == [0, 1]
    assert d.add_path([7], parent=-1) == [2]
    assert d.add_path([5, 2]) == [0, 3]  # merges with the existing child 5, then branches
    assert d.tokens == [5, 1, 7, 2]
    assert d.parents == [-1, 0, -1, 0]
    assert d.depths == [0, 1, 0, 1]
    assert d.trunk_len == 2 and not d.is_chain
    assert d.path_to(3) == [0, 3]
    assert d.children() == {-1: [0, 2], 0: [1, 3]}
    m = tree_attention(d.parents, 1)
    # rows: prefix, n0, n1, n2, n3 ; node 3 sees prefix, node 0, itself -- not node 1 or 2
    assert m[4].tolist() == [True, True, False, False, True]


def test_chain_and_probe():
    d = Draft.chain([3, 4, 5])
    assert d.is_chain and d.trunk_len == 3 and d.depths == [0, 1, 2]
    d.add_node(9, -1, "window", PROBE)
    assert not d.is_chain and d.kinds == [CANDIDATE] * 3 + [PROBE]


def test_additive_mask_shape_and_values():
    m = additive_mask([-1, -1], 1, 5, torch.float32)
    assert m.shape == (1, 1, 3, 8)
    assert (m[0, 0, :, :5] == 0).all()  # cached context is visible to every query
    assert m[0, 0, 2, 6] == torch.finfo(torch.float32).min  # sibling hidden
    assert m[0, 0, 2, 7] == 0 and m[0, 0, 2, 5] == 0
