"""Real prompts on the simulator get a real tokenizer's token counts (sim.prompt_tokens=tokenizer, chat template
included) or a measured characters-per-token ratio (sim.prompt_tokens=ratio); bad settings are one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.tiny_tokenizer import make_tokenizer

from ouroboros.errors import OuroborosError
from ouroboros.prompts.datasets import load_prompts
from simulators.architectures import load_conf
from simulators.corpus import load_corpus
from simulators.pair import make_pair, sim_options
from simulators.tokens import RatioTokenizer, RealCountTokenizer, measure_chars_per_token

WORDS = ["def", "return", "x", "y", "the", "cat", "sat", "on", "mat", "(", ")", ":", "+", "1", "2"]
FIX = Path(__file__).parent / "fixtures"


def surrogate():
    return load_corpus("code", 4096).tokenizer


def test_real_counts_and_repeats_are_kept():
    real = make_tokenizer(WORDS)
    tok = RealCountTokenizer(surrogate(), real)
    text = "def x ( y ) : return x + 1 the cat sat on the mat def x"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(real(text, add_special_tokens=False)["input_ids"]) == 18
    assert ids[0] == ids[16] == surrogate().ids["def"]  # the same real token, the same surrogate id
    assert ids[6] == surrogate().ids["return"]
    assert all(0 < i < tok.vocab_size for i in ids)


def test_with_copy_from_prompt_the_chat_templates_special_tokens_are_the_surrogates_eos():
    """sim.copy_from=prompt: a real special token (a chat template's) becomes the surrogate's EOS, which the target
    never copies; ordinary tokens map as before; without it a special token gets an ordinary stand-in id."""
    real = make_tokenizer(WORDS)
    real.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|end|>"]})
    text = "<|user|> def x ( y ) <|end|>"
    plain = RealCountTokenizer(surrogate(), real)(text)["input_ids"]
    marked = RealCountTokenizer(surrogate(), real, specials_eos=True)(text)["input_ids"]
    eos = surrogate().eos_id
    assert marked[0] == marked[-1] == eos and plain[0] != eos and plain[-1] != eos
    assert marked[1:-1] == plain[1:-1] and eos not in plain


def test_chat_template_prompts_have_the_real_length(tmp_path: Path):
    real = make_tokenizer([chr(c) for c in range(ord("a"), ord("z") + 1)])
    real.save_pretrained(tmp_path / "tok")
    pair = make_pair(load_conf("model", "qwen_coder"), load_conf("hardware", "h100"),
                     {"prompt_tokens": "tokenizer", "tokenizer": str(tmp_path / "tok")})
    assert isinstance(pair.tokenizer, RealCountTokenizer)
    data = {"kind": "jsonl", "path": str(FIX / "prompts.jsonl")}
    sim = load_prompts(data, pair.tokenizer, pair.target.vocab_size, 0)
    ref = load_prompts(data, real, real.vocab_size, 0)
    assert [len(p.ids) for p in sim] == [len(p.ids) for p in ref]
    assert len(sim[0].ids) > 3  # the chat template's tokens are counted too
    marked = make_pair(load_conf("model", "qwen_coder"), load_conf("hardware", "h100"),
                       {"prompt_tokens": "tokenizer", "tokenizer": str(tmp_path / "tok"), "copy_from": "prompt"})
    assert marked.tokenizer.encode("<eos> a") == [marked.tokenizer.surrogate.eos_id, pair.tokenizer.encode("a")[0]]
    assert pair.tokenizer.encode("<eos>")[0] != pair.tokenizer.surrogate.eos_id


def test_ratio_gives_characters_over_ratio_tokens():
    tok = RatioTokenizer(surrogate(), 4.0)
    text = "The quick brown fox jumps over the lazy dog, again and again, said the narrator. " * 3
    ids = tok(text)["input_ids"]
    assert len(ids) == round(len(text) / 4.0)
    assert len(surrogate().encode(text)) > 1.5 * len(ids)  # the surrogate's own count is far higher on prose
    assert set(ids) <= set(surrogate().encode(text))
    assert tok("")["input_ids"] == []


def test_measure_chars_per_token():
    real = make_tokenizer(WORDS)
    assert measure_chars_per_token(["the cat sat", "on the mat"], real) == pytest.approx(21 / 6)


@pytest.mark.parametrize(("sim", "msg"), [
    ({"prompt_tokens": "bpe"}, "unknown sim.prompt_tokens 'bpe'; known: surrogate, tokenizer, ratio"),
    ({"prompt_tokens": "ratio"}, "sim.prompt_tokens=ratio needs sim.chars_per_token > 0, got None"),
    ({"prompt_tokens": "ratio", "chars_per_token": -2}, "sim.chars_per_token must be > 0, got -2"),
])
def test_bad_settings_are_one_line(sim, msg):
    with pytest.raises(OuroborosError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        sim_options(sim)


def test_a_pair_without_a_fetched_tokenizer_says_what_to_do(tmp_path: Path):
    with pytest.raises(OuroborosError, match="has no fetched tokenizer; set sim.tokenizer=<dir>"):
        make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"), {"prompt_tokens": "tokenizer"})
    with pytest.raises(OuroborosError, match="run `python -m ouroboros.fetch qwen-coder` first"):
        make_pair({**load_conf("model", "qwen_coder"), "cache_dir": str(tmp_path)}, load_conf("hardware", "h100"),
                  {"prompt_tokens": "tokenizer"})


def test_bpe_pieces_carry_their_leading_space():
    tok = load_corpus("code", 4096, "bpe").tokenizer
    assert [tok.pieces[i] for i in tok.encode("        return self.x\n")] == \
        ["       ", " return", " self", ".", "x", "\n"]
    words = load_corpus("code", 4096).tokenizer
    text = "    def __init__(self, name):\n        self.name = name\n        return None\n"
    assert len(tok.encode(text)) < len(words.encode(text))
    with pytest.raises(OuroborosError, match="unknown sim.pieces .x.; known: words, bpe, real"):
        make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"), {"pieces": "x"})


def test_bpe_surrogate_is_lossless():
    from ouroboros.loop.decode import decode
    from ouroboros.strategies import build_proposer

    pair = make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"), {"pieces": "bpe"})
    for p in pair.default_prompts(2, 0):
        ref = decode(pair.target, build_proposer("vanilla", {}, pair.target), p.ids, 40, pair.eos_ids).output
        for name, params in (("speculative", {"gamma": 5}), ("ouroboros", {"gamma": 4, "W": 3, "N": 3, "G": 3})):
            proposer = build_proposer(name, params, pair.target, pair.draft)
            assert decode(pair.target, proposer, p.ids, 40, pair.eos_ids).output == ref
