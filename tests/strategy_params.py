"""Hypothesis search space of each registered strategy's options (one entry per registry line).
Proposer-side extras (e.g. a pre-filled pool or corpus) go through `setup` hooks in the strategy's tests."""

from hypothesis import strategies as st

PARAMS = {
    "vanilla": st.just({}),
    "speculative": st.fixed_dictionaries({"gamma": st.integers(1, 8), "schedule": st.sampled_from(["constant", "hf"])}),
    "pld": st.fixed_dictionaries({
        "max_ngram": st.integers(1, 4),
        "num_pred_tokens": st.integers(1, 8),
        "prefer": st.sampled_from(["first", "last"]),
    }),
    "lookahead": st.fixed_dictionaries({
        "W": st.integers(1, 5),
        "N": st.integers(2, 5),
        "G": st.integers(0, 5),
        "prompt_phrases": st.booleans(),
        "output_phrases": st.booleans(),
        "max_pool_phrases": st.sampled_from([0, 3, 50]),
        "seed": st.integers(0, 3),
    }),
    "ouroboros": st.fixed_dictionaries({
        "gamma": st.integers(1, 6),
        "W": st.integers(1, 4),
        "N": st.integers(2, 5),
        "G": st.integers(0, 4),
        "K": st.integers(0, 3),
        "phrase_drafting": st.booleans(),
        "lengthening": st.booleans(),
        "harvest": st.booleans(),
        "history": st.booleans(),
        "prompt_phrases": st.booleans(),
        "output_phrases": st.booleans(),
        "max_pool_phrases": st.sampled_from([0, 4, 50]),
        "trunk_overshoot": st.booleans(),
    }),
    "rest": st.fixed_dictionaries({
        # corpus: repeated units (so the longest suffix often matches several times) or noise
        "corpus": st.one_of(
            st.lists(st.integers(0, 63), min_size=1, max_size=60),
            st.builds(lambda u, r: (u * r)[:80], st.lists(st.integers(0, 63), min_size=1, max_size=6),
                      st.integers(1, 20))),
        "max_suffix": st.integers(1, 6),
        "depth": st.integers(1, 8),
        "num_nodes": st.integers(1, 16),
        "max_occurrences": st.integers(1, 32),
    }),
    "cascade": st.fixed_dictionaries({
        "gamma": st.integers(1, 6),
        "vertical": st.sampled_from(["pld", "none"]),
        "horizontal": st.integers(0, 4),
        "max_ngram": st.integers(1, 3),
        "num_pred_tokens": st.integers(1, 5),
    }),
    "suffix": st.fixed_dictionaries({
        "num_speculative_tokens": st.one_of(st.none(), st.integers(1, 8)),
        "suffix_decoding_max_tree_depth": st.integers(1, 12),
        "suffix_decoding_max_spec_factor": st.sampled_from([0.5, 1.0, 2.0, 4.0]),
        "suffix_decoding_min_token_prob": st.sampled_from([0.0, 0.1, 0.5]),
        "suffix_decoding_max_cached_requests": st.sampled_from([0, 1, 3]),
        "use_tree_spec": st.booleans(),
    }),
    # k, then a template within it: per-level widths, or index paths (an imbalanced tree, as the paper's)
    "recycling": st.integers(1, 4).flatmap(lambda k: st.fixed_dictionaries({
        "k": st.just(k),
        "keep_history": st.booleans(),
    }, optional={
        "widths": st.lists(st.integers(1, min(k, 2)), min_size=1, max_size=4),
    }) if k < 3 else st.fixed_dictionaries({"k": st.just(k), "keep_history": st.booleans(),
                                           "tree": st.just([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])})),
}
