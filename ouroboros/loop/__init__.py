"""The decode loop and its contracts: one loop over token-tree drafts (decode), the draft trees (draft), their
verification (verify, sampling) and what a run measures (metrics). Knows no model family, strategy or backend.
"""
