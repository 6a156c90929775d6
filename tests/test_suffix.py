"""strategy=suffix (ouroboros/strategies/suffix.py): golden tables on the suffix tree and its speculation, the tree
against a brute-force reference (every substring counted by scanning), against ArcticInference's
SuffixDecodingCache.speculate (the reference vLLM imports; skipped without the arctic-inference package), and the
proposer's edge cases: no match, EOS inside a draft, eviction of the global tree, save / load.

The ArcticInference check needs the package importable. It is a source package (C++ with nanobind; its setup imports
torch): in a separate venv, `pip install torch nanobind==2.9.2 setuptools wheel ninja cmake protobuf==5.29.6
grpcio-tools numpy`, `pip download arctic-inference --no-deps --no-binary arctic-inference`, then
`MAX_JOBS=1 pip install --no-build-isolation --no-deps arctic_inference-*.tar.gz` (0.3.0: about 2 minutes on one core;
`--no-binary :all:` instead builds the build dependencies from source too, grpcio-tools among them, which did not
finish in 5 minutes here), and put a folder holding only its `arctic_inference` package on PYTHONPATH."""

import heapq
import json
import random
from collections import Counter

import pytest
from conftest import get_model
from reference import reference_greedy

from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer, check_files, make_config
from ouroboros.strategies import suffix as sx
from ouroboros.strategies.suffix import SuffixCache, SuffixTree


# ---------------------------------------------------------------------------------------------- golden tables
def test_golden_path_and_tree():
    t = SuffixTree(8)
    t.extend(0, [1, 2, 3, 1, 2, 4, 1, 2])
    path = t.speculate([1, 2, 3, 1, 2, 4, 1, 2], 8, 1.0, 0.1, tree=False)
    assert (path.tokens, path.parents, path.match_len) == ([3, 1], [-1, 0], 2)
    assert path.probs == pytest.approx([1 / 3, 1 / 3]) and path.score == pytest.approx(2 / 3)
    tree = t.speculate([1, 2, 3, 1, 2, 4, 1, 2], 8, 1.0, 0.1, tree=True)
    assert (tree.tokens, tree.parents, tree.match_len) == ([3, 4], [-1, -1], 2)  # siblings: 3 seen first


def test_counts_are_occurrences_up_to_the_depth():
    t = SuffixTree(2)
    t.extend(0, [5, 5, 5])
    assert t.root.count == 3
    assert t.match([5]).count == 3 and t.match([5, 5]).count == 2
    assert t.match([5, 5, 5]) is None          # 3 tokens > depth 2


def test_min_prob_and_spec_factor_cut_the_draft():
    t = SuffixTree(16)
    t.extend(0, [7, 1, 2, 3, 4, 7, 1, 9, 9, 7, 1])
    # pattern [.., 7, 1]: "7 1" occurs 3 times, continued by 2 and 9 once each (p 1/3)
    assert t.speculate([7, 1], 8, 1.0, 0.5, tree=False).tokens == []              # 1/3 < 0.5
    assert t.speculate([0, 7, 1], 8, 1.0, 0.1, tree=False).tokens == [2, 3]       # m=2: at most 2 tokens
    assert t.speculate([0, 7, 1], 8, 2.0, 0.1, tree=False).tokens == [2, 3, 4, 7]  # factor 2: 4 tokens
    assert t.speculate([0, 7, 1], 3, 2.0, 0.1, tree=False).tokens == [2, 3, 4]     # max_spec_tokens 3


def test_full_pattern_is_never_matched():
    t = SuffixTree(8)
    t.extend(0, [4, 5, 6])
    assert t.speculate([4], 8).tokens == []               # m < len(pattern) = 1: nothing is tried
    assert t.speculate([9, 4], 8).tokens == [5]           # m=1: "4"


def test_remove_drops_a_sequence_and_its_nodes():
    t = SuffixTree(4)
    t.extend(0, [1, 2, 3])
    alone = t.n_nodes
    t.extend(1, [1, 2, 9])
    t.remove(1)
    assert t.n_nodes == alone and t.root.count == 3
    assert t.match([1, 2, 9]) is None and t.match([1, 2]).count == 1


# ---------------------------------------------------------------------------------------------- brute force
class BruteTree:
    """Every substring of at most `depth` tokens counted by scanning the sequences; the tick of its last
    occurrence ever appended (the tie order); speculation over those counts, as the module docstring states it."""

    def __init__(self, depth):
        self.depth = depth
        self.seqs: dict[int, list[tuple[int, int]]] = {}   # seq id -> [(token, tick)]
        self.ever: list[list[tuple[int, int]]] = []        # every sequence ever appended (removed ones too)
        self.tick = 0

    def append(self, seq, tok):
        self.tick += 1
        if seq not in self.seqs:
            self.seqs[seq] = []
            self.ever.append(self.seqs[seq])
        self.seqs[seq].append((tok, self.tick))

    def remove(self, seq):
        del self.seqs[seq]

    def counts(self):
        count, stamp = Counter(), {}
        for seqs, counted in ((self.ever, False), (list(self.seqs.values()), True)):
            for s in seqs:
                for j in range(len(s)):
                    for n in range(1, min(self.depth, len(s) - j) + 1):
                        key = tuple(t for t, _ in s[j:j + n])
                        if counted:
                            count[key] += 1
                        stamp[key] = max(stamp.get(key, 0), s[j + n - 1][1])
        count[()] = sum(len(s) for s in self.seqs.values())
        return count, stamp

    def speculate(self, pattern, max_tokens, factor, min_prob, tree):
        count, stamp = self.counts()

        def children(s):
            kids = [k for k in count if len(k) == len(s) + 1 and k[:-1] == s and count[k] > 0]
            return sorted(kids, key=lambda k: (-count[k], stamp[k]))

        pattern = pattern[-self.depth:]
        best = ([], [], [], 0.0, 0)
        for m in range(1, len(pattern)):
            s = tuple(pattern[len(pattern) - m:])
            if count.get(s, 0) == 0:
                break
            n = max(0, min(max_tokens, int(m * factor + 1e-6)))
            toks, pars, probs = [], [], []
            if tree:
                heap, order = [], 0
                for k in children(s):
                    if count[k] / count[s] >= min_prob:
                        heapq.heappush(heap, (-count[k] / count[s], order, k, -1))
                        order += 1
                while heap and len(toks) < n:
                    negp, _, k, par = heapq.heappop(heap)
                    toks.append(k[-1])
                    pars.append(par)
                    probs.append(-negp)
                    for c in children(k):
                        if -negp * count[c] / count[k] >= min_prob:
                            heapq.heappush(heap, (negp * count[c] / count[k], order, c, len(toks) - 1))
                            order += 1
            else:
                p, node = 1.0, s
                while len(toks) < n and children(node):
                    c = children(node)[0]
                    p *= count[c] / count[node]
                    if p < min_prob:
                        break
                    toks.append(c[-1])
                    pars.append(len(toks) - 2)
                    probs.append(p)
                    node = c
            if sum(probs) >= best[3]:
                best = (toks, pars, probs, sum(probs), m)
        return best


@pytest.mark.parametrize("seed", range(12))
def test_tree_equals_brute_force(seed):
    rng = random.Random(seed)
    depth = rng.choice([1, 2, 3, 5, 8])
    vocab = rng.choice([2, 3, 5])
    fast, slow = SuffixTree(depth), BruteTree(depth)
    live = []
    checked = 0
    for _ in range(60):
        op = rng.random()
        if op < 0.08 and live:
            seq = live.pop(rng.randrange(len(live)))
            fast.remove(seq)
            slow.remove(seq)
            continue
        seq = rng.choice(live + [len(live) + 100 * seed + _]) if live and op < 0.7 else 1000 + _
        if seq not in live:
            live.append(seq)
        tok = rng.randrange(vocab)
        fast.append(seq, tok)
        slow.append(seq, tok)
        if rng.random() < 0.5:
            pattern = [rng.randrange(vocab) for _ in range(rng.randint(1, depth + 2))]
            args = (rng.randint(1, 6), rng.choice([0.5, 1.0, 3.0]), rng.choice([0.0, 0.1, 0.4]), rng.random() < 0.5)
            got = fast.speculate(pattern, *args)
            want = slow.speculate(pattern, *args)
            assert (got.tokens, got.parents, got.match_len) == (want[0], want[1], want[4]), (pattern, args)
            assert got.probs == pytest.approx(want[2])
            checked += 1
    assert checked > 10


# ---------------------------------------------------------------------------------------------- ArcticInference
def _arctic():
    return pytest.importorskip("arctic_inference.suffix_decoding")


def _streams(seed):
    """Requests (prompt, output chunks as the loop commits them) over a small vocabulary, so patterns recur within
    and across requests."""
    rng = random.Random(seed)
    vocab = rng.choice([4, 8, 16])
    units = [[rng.randrange(vocab) for _ in range(rng.randint(2, 6))] for _ in range(3)]
    reqs = []
    for _ in range(rng.randint(2, 5)):
        prompt = sum((rng.choice(units) for _ in range(rng.randint(1, 4))), [])
        out = sum((rng.choice(units) + [rng.randrange(vocab)] for _ in range(rng.randint(1, 6))), [])
        chunks, i = [], 0
        while i < len(out):
            n = rng.randint(1, 4)
            chunks.append(out[i:i + n])
            i += n
        reqs.append((prompt, chunks))
    return reqs


def _tie_free(cache, pattern, args):
    """Our speculation does not depend on how equal counts are ordered (the other order gives the same)."""
    a = cache.speculate(pattern, *args)
    orig = sx._rank
    sx._rank = lambda n: (n.count, n.stamp)
    try:
        b = cache.speculate(pattern, *args)
    finally:
        sx._rank = orig
    return a[0].tokens == b[0].tokens and a[0].parents == b[0].parents and a[1] == b[1]


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_proposals_equal_arctic_inference(seed, tree):
    """Same token streams through ours and ArcticInference's SuffixDecodingCache (start_request with the prompt,
    add_active_response per committed chunk, speculate on the last max_tree_depth tokens, as vLLM drives it).
    Where the ordering of equal counts does not matter to our proposal, the proposals are equal (tokens, parents,
    match length, probabilities); a tree's score and probabilities are equal in every case (the most probable
    nodes), and its root paths unless it was cut at max_spec_tokens (where equal probabilities may compete)."""
    arctic = _arctic()
    rng = random.Random(seed)
    depth, max_cached = rng.choice([4, 8, 24]), rng.choice([1, 2, 10])
    factor, min_prob = rng.choice([0.5, 1.0, 2.0]), rng.choice([0.1, 0.3])
    ref = arctic.SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=max_cached)
    ours = SuffixCache(depth, max_cached)
    compared = exact = 0
    for r, (prompt, chunks) in enumerate(_streams(seed)):
        ref.start_request(r, prompt)
        ours.start_request(prompt)
        ctx = list(prompt)
        for chunk in chunks:
            ref.add_active_response(r, chunk)
            ours.add(chunk)
            ctx += chunk
            pattern = ctx[-depth:]
            spec = rng.randint(1, 12)
            got, _ = ours.speculate(pattern, spec, factor, min_prob, tree)
            want = ref.speculate(r, pattern, max_spec_tokens=spec, max_spec_factor=factor, min_token_prob=min_prob,
                                 use_tree_spec=tree)
            compared += 1
            if tree:  # the most probable nodes: their probabilities do not depend on how ties are ordered
                assert got.score == pytest.approx(want.score, rel=1e-5)
                assert sorted(got.probs) == pytest.approx(sorted(want.probs), rel=1e-5)
            if not _tie_free(ours, pattern, (spec, factor, min_prob, tree)):
                continue
            assert got.match_len == want.match_len
            if tree and len(got.tokens) == spec:
                continue
            exact += 1
            assert _paths(got.tokens, got.parents) == _paths(want.token_ids, want.parents)
            if not tree:
                assert got.probs == pytest.approx(list(want.probs), rel=1e-5)
        ref.stop_request(r)
    assert compared >= 5 and exact >= 2


def _paths(tokens, parents):
    out = set()
    for i in range(len(tokens)):
        path, j = [], i
        while j >= 0:
            path.append(tokens[j])
            j = parents[j]
        out.add(tuple(reversed(path)))
    return out


# ---------------------------------------------------------------------------------------------- the proposer
def test_no_match_gives_an_empty_draft():
    model = get_model("llama")
    target = HFBackend(model)
    prop = build_proposer("suffix", {}, target)
    res = decode(target, prop, [1, 2, 3, 4, 5], 2)       # distinct tokens: nothing to match at the first step
    assert res.steps[0].n_nodes == 0 and res.output == reference_greedy(model, [1, 2, 3, 4, 5], 2)
    assert prop.stats()["lookups"] >= 1 and prop.stats()["hits"] == 0
    res = decode(target, prop, [7], 3)                   # a one-token prompt: no pattern to match at first
    assert res.steps[0].n_nodes == 0 and res.output == reference_greedy(model, [7], 3)


def test_eos_inside_a_draft_stops_there():
    """The global tree holds an earlier output; a later prompt ending with that output's first tokens is drafted
    its continuation, EOS included: the output stops at EOS, as greedy decoding does."""
    model = get_model("llama")
    prompt = [49, 53, 5, 33, 62, 51]
    first = reference_greedy(model, prompt, 12)
    eos_at = next(i for i in range(3, 9) if first[i] not in first[:i])   # EOS: a token not emitted before it
    eos = (first[eos_at],)
    target = HFBackend(model)
    prop = build_proposer("suffix", {"suffix_decoding_max_spec_factor": 8.0, "use_tree_spec": False}, target)
    decode(target, prop, prompt, 12)
    second = prompt + first[:2]
    res = decode(target, prop, second, 20, eos_ids=eos)
    assert res.output == reference_greedy(model, second, 20, eos) and res.output[-1] == eos[0]
    assert res.stop_reason == "eos"
    last = res.steps[-1]   # EOS was a draft node the target accepted: the step ends there, its bonus token cut
    assert last.accepted >= 1 and last.new_tokens == last.accepted
    assert sum(s.accepted for s in res.steps) >= eos_at - 2


def test_global_tree_evicts_oldest_first():
    cache = SuffixCache(8, 2)
    for out in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 1]):
        cache.start_request([0])
        cache.add(out)
    s = cache.stats()
    assert (s.cached_requests, s.evicted_requests) == (2, 1)
    assert s.global_tokens == 8 and list(cache.glob.seqs.values()) == [[5, 6, 7, 8], [9, 9, 9, 1]]
    assert cache.glob.match([1, 2]) is None and cache.glob.match([6, 7]) is not None
    none = SuffixCache(8, 0)
    none.start_request([0])
    none.add([1, 2, 1, 2])
    assert none.stats().cached_requests == 0 and none.speculate([0, 1], 4, 1.0, 0.1, False)[1] == "suffix:request"


def test_eviction_in_a_run_keeps_decoding_lossless():
    model = get_model("qwen2")
    target = HFBackend(model)
    prop = build_proposer("suffix", {"suffix_decoding_max_cached_requests": 1}, target)
    for p in ([5, 6, 7, 5, 6, 7], [5, 6, 8], [1, 5, 6, 7]):
        assert decode(target, prop, p, 10).output == reference_greedy(model, p, 10)
    assert prop.stats()["cached_requests"] == 1 and prop.stats()["evicted_requests"] == 2


def test_save_load_round_trip(tmp_path):
    model = get_model("llama")
    path = str(tmp_path / "cache.json")
    target = HFBackend(model)
    params = {"suffix_decoding_max_cached_requests": 2, "cache_save": path}
    saver = build_proposer("suffix", params, target)
    for p in ([4, 5, 6, 4, 5], [8, 9, 8, 9], [4, 5, 7]):
        decode(target, saver, p, 10)
        saver.checkpoint()
    loader = build_proposer("suffix", {"suffix_decoding_max_cached_requests": 2, "cache_load": path}, target)
    assert list(loader.cache.glob.seqs.values()) == list(saver.cache.glob.seqs.values())
    assert loader.cache.glob.n_nodes == saver.cache.glob.n_nodes
    nxt = [9, 8, 9, 4, 5]
    a, b = decode(target, saver, nxt, 12), decode(target, loader, nxt, 12)
    assert a.output == b.output == reference_greedy(model, nxt, 12)
    assert [s.n_nodes for s in a.steps] == [s.n_nodes for s in b.steps]   # the same drafts from the loaded tree


def test_bad_cache_files_and_params_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(OuroborosError, match="corrupt"):
        check_files("suffix", {"cache_load": str(bad)})
    with pytest.raises(OuroborosError, match="does not exist"):
        check_files("suffix", {"cache_load": str(tmp_path / "missing.json")})
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"format": sx.FORMAT, "version": sx.VERSION, "meta": {"vocab_size": 7},
                                 "outputs": [[1, 2]]}))
    target = HFBackend(get_model("llama"))
    with pytest.raises(OuroborosError, match="incompatible: vocab_size"):
        build_proposer("suffix", {"cache_load": str(wrong)}, target)
    prop = build_proposer("suffix", {"cache_load": str(wrong), "cache_on_error": "empty"}, target)
    assert "incompatible" in prop.load_note and prop.cache.stats().cached_requests == 0
    for params, msg in [({"suffix_decoding_max_tree_depth": 0}, "max_tree_depth must be >= 1"),
                        ({"suffix_decoding_min_token_prob": 1.5}, r"min_token_prob must be in \[0, 1\]"),
                        ({"suffix_decoding_max_cached_requests": -1}, "max_cached_requests must be >= 0"),
                        ({"cache_save": "x.json", "suffix_decoding_max_cached_requests": 0}, "need"),
                        ({"num_speculative_tokens": 0}, "num_speculative_tokens must be >= 1"),
                        ({"suffix_decoding_max_spec_factor": -1.0}, "max_spec_factor must be >= 0"),
                        ({"cache_on_error": "skip"}, "cache_on_error")]:
        with pytest.raises(OuroborosError, match=msg):
            make_config("suffix", params)


def greedy_lm(lm, prompt, n, eos):
    """Greedy decoding of a surrogate LM, one token at a time (no loop, no drafts)."""
    st = lm.start()
    for t in prompt:
        st = lm.step(st, t)
    out = []
    for _ in range(n):
        out.append(lm.predict(st))
        if out[-1] in eos:
            break
        st = lm.step(st, out[-1])
    return out


@pytest.mark.parametrize("params", [{}, {"use_tree_spec": False, "suffix_decoding_max_cached_requests": 2}])
def test_simulated_prompts_with_a_global_tree_are_lossless(params):
    from simulators import make_pair
    from simulators.architectures import load_conf

    pair = make_pair(dict(load_conf("model", "llama70b_7b")), dict(load_conf("hardware", "a800x2")), {})
    prop = build_proposer("suffix", params, pair.target)
    for p in pair.default_prompts(6, 3):
        res = decode(pair.target, prop, p.ids, 48, pair.eos_ids, prompt_id=p.id)
        assert res.output == greedy_lm(pair.target.lm, p.ids, 48, pair.eos_ids)
    st = prop.stats()
    assert st["hits"] > 0 and st["cached_requests"] == min(6, params.get("suffix_decoding_max_cached_requests", 6))
