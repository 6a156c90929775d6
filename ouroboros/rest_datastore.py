"""Builder command for the REST datastore (the index itself: ouroboros/strategies/datastore.py):

    python -m ouroboros.rest_datastore --out ds.npz (--tokens FILE | --text FILE --tokenizer DIR)

Token files (.npy, or whitespace-separated ids one document per line) or text files (.txt: one document;
.jsonl: one per line, `--field`) tokenized with a local tokenizer directory. Every bad input is one error line.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from ouroboros.argparser import ArgumentParser
from ouroboros.errors import OuroborosError, cli
from ouroboros.paths import check_writable
from ouroboros.strategies.datastore import Datastore, continuation_tree, suffix_array

__all__ = ["Datastore", "continuation_tree", "main", "read_docs", "suffix_array"]


def read_docs(tokens: list[str], texts: list[str], tokenizer: str | None, field: str) -> list[list[int]]:
    docs: list[list[int]] = []
    for path in tokens:
        if path.endswith(".npy"):
            arr = np.load(path, allow_pickle=False)
            docs.append([int(t) for t in arr.reshape(-1)])
        else:
            with open(path, encoding="utf-8") as f:
                for ln, line in enumerate(f, 1):
                    try:
                        if line.strip():
                            docs.append([int(t) for t in line.split()])
                    except ValueError:
                        raise OuroborosError(f"{path}:{ln}: a token file holds whitespace-separated ints") from None
    if texts:
        if not tokenizer:
            raise OuroborosError("--text needs --tokenizer (a local tokenizer directory)")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
        for path in texts:
            with open(path, encoding="utf-8") as f:
                if path.endswith(".jsonl"):
                    for ln, line in enumerate(f, 1):
                        if line.strip():
                            try:
                                docs.append(tok.encode(json.loads(line)[field], add_special_tokens=False))
                            except (json.JSONDecodeError, KeyError, TypeError):
                                raise OuroborosError(f"{path}:{ln}: expected a JSON object with a {field!r} "
                                                     "string") from None
                else:
                    docs.append(tok.encode(f.read(), add_special_tokens=False))
    if not any(docs):
        raise OuroborosError("the REST corpus is empty")
    return docs


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ouroboros.rest_datastore",
                                 description="Build a REST datastore (.npz) from token or text files.")
    ap.add_argument("--out", required=True, help="output .npz")
    ap.add_argument("--tokens", action="append", default=[],
                    help=".npy int array, or a text file of whitespace-separated ids, one document per line")
    ap.add_argument("--text", action="append", default=[], help=".txt (one document) or .jsonl (one per line)")
    ap.add_argument("--tokenizer", help="local tokenizer directory (for --text)")
    ap.add_argument("--field", default="text", help="JSONL field holding the text")
    args = ap.parse_args(argv)
    check_writable(args.out, "--out")
    for p in args.tokens + args.text:
        if not os.path.isfile(p):
            raise OuroborosError(f"input {p} does not exist")
    ds = Datastore.build(read_docs(args.tokens, args.text, args.tokenizer, args.field))
    ds.save(args.out)
    print(f"datastore: {len(ds.tokens)} tokens -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
