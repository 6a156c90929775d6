"""The simulator's tokenizers, one place: the surrogate's own (`PieceTokenizer`: words, digit runs, spaces; or
`RealTokenizer`: the pair's real one, `sim.pieces=real`), and real prompts on the surrogate with the token counts a
real tokenizer gives (`sim.prompt_tokens`).

The surrogate's own tokenizer (`PieceTokenizer`: 4,096 pieces of Python source) splits prose into about 1.3
characters per token, where real tokenizers give about 3-4: prose prompts come out ~3x too long, so modelled
prefill and attention costs are inflated and long prompts overflow the context. Two fixes, as tokenizers the
dataset loaders call (`tok(text, add_special_tokens=False)["input_ids"]`, `decode`, and the chat template):

- `tokenizer` (`RealCountTokenizer`): the pair's real tokenizer (for qwen_coder the fetched one; else
  `sim.tokenizer=<dir>`) tokenizes the prompt, chat template included, so the count is exactly the real one;
  each real token becomes a surrogate id (the piece equal to its text, or to its text without surrounding
  spaces, else a fixed hash of its text), so a prompt that repeats itself repeats in surrogate ids too.
- `ratio` (`RatioTokenizer`): round(characters / `sim.chars_per_token`) tokens, the surrogate's own encoding
  resampled evenly to that count (order kept, content thinned or stretched). Measure the ratio on the task's
  text with a real tokenizer (`measure_chars_per_token`; docs/simulator-fidelity.md lists measured values).

Continuations are still the surrogate's. Knows nothing of costs or strategies.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError
from simulators.simconfig import SimConfig

EOS_ID = 0
_PIECE = re.compile(r"[A-Za-z_]+|[0-9]+| +|\n|.", re.DOTALL)
# pieces="bpe": words carry their leading space, as GPT-2-style pre-tokenizers (and Qwen's) split text; an indent
# run keeps all but its last space, which joins the next word (" return"), so code and prose get about as many
# tokens per character as a real tokenizer gives (sim.pieces; measure_chars_per_token below measures the real ratio).
_PIECE_BPE = re.compile(r" ?[A-Za-z_]+| ?[0-9]+| ?[^\sA-Za-z_0-9]| +(?!\S)| +|\n|.", re.DOTALL)
PIECE_STYLES = {"words": _PIECE, "bpe": _PIECE_BPE}


class PieceTokenizer:
    """Words, digit runs, space runs and single characters; the `vocab_size` most frequent pieces of the
    corpus get ids (id 0 = EOS), any other text falls back to its characters (non-ASCII -> '?'). No chat
    template: real datasets (humaneval, mtbench, specbench, jsonl) on the `sim` backend are their plain text."""

    real_ids = False   # ids are the surrogate's own (RealTokenizer: the pair's real ids)
    eos_id = EOS_ID

    def __init__(self, text: str, vocab_size: int, style: str = "words"):
        chars = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
        if vocab_size < len(chars) + 2:
            raise OuroborosError(f"surrogate vocab must be >= {len(chars) + 2}, got {vocab_size}")
        if style not in PIECE_STYLES:
            raise OuroborosError(f"surrogate pieces must be one of {', '.join(PIECE_STYLES)}, got {style!r}")
        self.piece_re = PIECE_STYLES[style]
        counts = Counter(p for p in self.piece_re.findall(text) if len(p) > 1)
        top = [p for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 1 - len(chars)]]
        self.pieces = ["<|eos|>"] + chars + top
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.vocab_size = self.plain_vocab = len(self.pieces)

    def piece_id(self, piece: str) -> int | None:
        return self.ids.get(piece)

    def encode(self, text: str) -> list[int]:
        out, ids, q = [], self.ids, self.ids["?"]
        for p in self.piece_re.findall(text):
            i = ids.get(p)
            if i is not None:
                out.append(i)
            else:
                out.extend(ids.get(c, q) for c in p)
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] if 0 < i < len(self.pieces) else "" for i in ids)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        """As a transformers tokenizer is called (the dataset loaders tokenize real prompts this way on `sim`);
        there are no special tokens to add."""
        return {"input_ids": self.encode(text)}


class RealTokenizer:
    """The pair's own tokenizer as the surrogate's (`sim.pieces=real`): the surrogate target then reads and writes
    REAL token ids, so real prompts, REST datastores and the real pair's traces need no mapping, and which tokens
    a datastore or a prompt shares with the surrogate's text is what the real tokenizer makes of them. Ids below
    `plain_vocab` are ordinary tokens; the added special tokens above it are never produced (EOS = the
    tokenizer's own)."""

    real_ids = True

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        try:
            self.tok = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise OuroborosError(f"sim.pieces=real: cannot load the tokenizer in {path!r}: "
                                 f"{str(e).splitlines()[0]}") from None
        self.vocab_size = len(self.tok)
        added = list(getattr(self.tok, "added_tokens_decoder", {}) or {})
        self.plain_vocab = min(added) if added else self.vocab_size
        eos = self.tok.eos_token_id
        self.eos_id = int(eos) if eos is not None else self.plain_vocab
        self.chat_template = getattr(self.tok, "chat_template", None)

    def piece_id(self, piece: str) -> int | None:
        ids = self.encode(piece)
        return ids[0] if len(ids) == 1 else None

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int], **kw: Any) -> str:
        return str(self.tok.decode(ids))

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def apply_chat_template(self, messages: Any, **kw: Any) -> Any:
        return self.tok.apply_chat_template(messages, **kw)


class RealCountTokenizer:
    """Encode with a real tokenizer, map each real token to a surrogate id; decode as the surrogate does.
    `specials_eos` (sim.copy_from=prompt): the real tokenizer's special tokens (a chat template's) become the
    surrogate's EOS, which it never copies or writes mid-text (a real model writes none of them in its answer)."""

    def __init__(self, surrogate: PieceTokenizer, real: Any, specials_eos: bool = False):
        self.surrogate, self.real = surrogate, real
        self.vocab_size = surrogate.vocab_size
        self.chat_template = getattr(real, "chat_template", None)
        self._map: dict[int, int] = {}
        if specials_eos:
            specials = set(getattr(real, "all_special_ids", ()) or ())
            specials |= set(getattr(real, "added_tokens_decoder", {}) or {})
            self._map.update({int(i): surrogate.eos_id for i in specials})
        self._piece: dict[int, int | None] = {}

    def piece_id(self, real_id: int) -> int | None:
        """The surrogate piece of the real token's text, None when it has none."""
        if real_id not in self._piece:
            text = self.real.decode([real_id])
            ids = self.surrogate.ids
            self._piece[real_id] = ids.get(text) or ids.get(text.strip())
        return self._piece[real_id]

    def surrogate_id(self, real_id: int) -> int:
        sid = self._map.get(real_id)
        if sid is None:
            sid = self.piece_id(real_id)
            if sid is None:
                # text the surrogate has no piece for: a fixed id from its bytes (never EOS), so distinct real
                # tokens stay distinct (a shared fallback would repeat phrases the real prompt does not)
                text = self.real.decode([real_id])
                sid = 1 + zlib.crc32(text.encode()) % (self.vocab_size - 1)
            self._map[real_id] = sid
        return sid

    def encode(self, text: str) -> list[int]:
        return [self.surrogate_id(i) for i in self.real(text, add_special_tokens=False)["input_ids"]]

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def apply_chat_template(self, messages: Any, **kw: Any) -> Any:
        return self.real.apply_chat_template(messages, **kw)

    def decode(self, ids: list[int], **kw: Any) -> str:
        return self.surrogate.decode(ids)


class RatioTokenizer:
    """round(len(text) / chars_per_token) tokens (at least 1): the surrogate encoding resampled to that count."""

    def __init__(self, surrogate: PieceTokenizer, chars_per_token: float):
        if not chars_per_token or chars_per_token <= 0:
            raise OuroborosError(f"sim.prompt_tokens=ratio needs sim.chars_per_token > 0, got {chars_per_token}")
        self.surrogate, self.chars_per_token = surrogate, float(chars_per_token)
        self.vocab_size = surrogate.vocab_size

    def encode(self, text: str) -> list[int]:
        ids = self.surrogate.encode(text)
        n = max(1, round(len(text) / self.chars_per_token)) if ids else 0
        return [ids[i * len(ids) // n] for i in range(n)]

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def decode(self, ids: list[int], **kw: Any) -> str:
        return self.surrogate.decode(ids)


def fetched_tokenizer_dir(model: dict[str, Any]) -> Path:
    """The tokenizer directory of a fetched pair's target (conf/model/qwen_coder.yaml: kind qwen-coder); never
    downloads: a pair not fetched yet is an error naming the command."""
    from ouroboros.fetch import PAIRS, converted_dir, default_cache_dir

    kind = str(model.get("kind"))
    if kind not in PAIRS:
        raise OuroborosError(f"sim.prompt_tokens=tokenizer: model {model.get('name') or kind!r} has no fetched "
                             "tokenizer; set sim.tokenizer=<dir> or use sim.prompt_tokens=ratio sim.chars_per_token=X")
    cache = Path(model["cache_dir"]) if model.get("cache_dir") else default_cache_dir()
    path = converted_dir(cache, PAIRS[kind][0], "bfloat16")
    if not (path / "tokenizer_config.json").is_file():
        raise OuroborosError(f"sim.prompt_tokens=tokenizer: no tokenizer in {path}; run `python -m ouroboros.fetch "
                             f"{kind}` first (or set sim.tokenizer=<dir>)")
    return path


def real_tokenizer_dir(tokenizer: str | None, model: dict[str, Any]) -> Path:
    """The pair's real tokenizer directory: `tokenizer` (sim.tokenizer), else the fetched pair's."""
    path = Path(tokenizer) if tokenizer else fetched_tokenizer_dir(model)
    if not path.is_dir():
        raise OuroborosError(f"sim.tokenizer {str(path)!r} is not a directory")
    return path


def prompt_tokenizer(opts: SimConfig, model: dict[str, Any], surrogate: PieceTokenizer | RealTokenizer,
                     specials_eos: bool = False) -> Any:
    """The tokenizer the simulated pair hands to the dataset loaders, per sim.prompt_tokens. A surrogate that
    speaks real ids (`sim.pieces=real`) is itself the real tokenizer: prompts get real ids whatever the mode.
    `specials_eos`: the real special tokens read as the surrogate's EOS (simulators.pair.specials_eos)."""
    mode = opts.prompt_tokens
    if isinstance(surrogate, RealTokenizer) or mode == "surrogate":
        return surrogate
    if mode == "ratio":
        return RatioTokenizer(surrogate, opts.chars_per_token or 0.0)
    path = real_tokenizer_dir(opts.tokenizer, model)
    from transformers import AutoTokenizer

    return RealCountTokenizer(surrogate, AutoTokenizer.from_pretrained(str(path)), specials_eos=specials_eos)


def measure_chars_per_token(texts: list[str], tokenizer: Any) -> float:
    """Characters per token of `tokenizer` over `texts` (total characters / total tokens)."""
    chars = sum(len(t) for t in texts)
    toks = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    if not toks:
        raise OuroborosError("no tokens to measure characters per token on")
    return chars / toks
