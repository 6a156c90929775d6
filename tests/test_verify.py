from ouroboros.loop.draft import PROBE, Draft
from ouroboros.loop.verify import verify_greedy


def test_golden_docstring_example():
    d = Draft()
    d.add_path([5, 1])
    d.add_path([7])
    v = verify_greedy(d, [5, 1, 9, 3])
    assert v.path == [0, 1] and v.tokens == [5, 1, 9] and v.bonus == 9


def test_chain_rejects_at_first_mismatch_and_counts_match():
    d = Draft.chain([4, 8, 6, 2])
    # preds: root 4 (ok), after 4 -> 7 (mismatch with 8), after 8 -> 6 (match, counted in #Match only)
    v = verify_greedy(d, [4, 7, 6, 0, 1])
    assert v.path == [0] and v.tokens == [4, 7]
    assert v.n_match == 2  # d0 == v0 and d2 == v2: [4, 6], not [4]
    assert v.n_match >= v.accepted


def test_empty_draft_gives_bonus_only():
    v = verify_greedy(Draft(), [11])
    assert v.path == [] and v.tokens == [11]


def test_longest_branch_wins_even_if_later():
    d = Draft()
    d.add_path([3, 4], merge=False)      # nodes 0, 1
    d.add_path([3, 4, 5], merge=False)   # nodes 2, 3, 4 (duplicate siblings)
    preds = [3, 4, 0, 4, 5, 6]
    v = verify_greedy(d, preds)
    assert v.path == [2, 3, 4] and v.tokens == [3, 4, 5, 6]


def test_probe_nodes_never_accepted():
    d = Draft()
    d.add_node(3, -1, "window", PROBE)
    v = verify_greedy(d, [3, 9])
    assert v.path == [] and v.tokens == [3]
