"""Hypothesis search space of each registered strategy's options (one entry per registry line).
Proposer-side extras (e.g. a pre-filled pool or corpus) go through `setup` hooks in the strategy's tests."""

from hypothesis import strategies as st

PARAMS = {
    "vanilla": st.just({}),
    "speculative": st.fixed_dictionaries({"gamma": st.integers(1, 8)}),
    "pld": st.fixed_dictionaries({
        "max_ngram": st.integers(1, 4),
        "num_pred_tokens": st.integers(1, 8),
        "prefer": st.sampled_from(["first", "last"]),
    }),
}
