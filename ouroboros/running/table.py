"""The console table a run, a sweep or the tuner prints at the end: one row per record (tokens, seconds, tok/s,
speedup, Spec-Bench speedup, eta, A, #Match, identical outputs; simulated points add their measured error bands,
clipped where they reach below what the figure can take; a rank among the points of one baseline where two of them
compare, its legend saying how: `speedup_ranks`), the settings every row shares above it, served points'
latencies, ours/peer ratios and divergences below, and a note for each row whose figures need one: prompts timed by
two or more processes (a resumed wall-clock point), a speedup measured against another record of its baseline than
the one shown. Names are never cut: the point column widens to the longest.

Reads `Record`s only; every figure comes from the record (computed once, by ouroboros.loop.metrics). The analysis
package writes the Markdown / CSV tables from the same records (analysis.report).
"""

from __future__ import annotations

from collections.abc import Callable

from ouroboros.running.peer_configs import PEERS
from ouroboros.running.record import Record
from ouroboros.running.sinks import BAND_FLOORS, BAND_NAMES, band_span, band_text
from ouroboros.strategies import strategy_params


def _budget(rec: Record) -> str:
    b = rec.max_new_tokens
    if b is None:
        return "?"
    return str(b) if isinstance(b, int) else f"{min(b)}-{max(b)} (per prompt)"


def _machine(rec: Record) -> str:
    hw = rec.hardware or {}
    if rec.clock == "modelled":
        return f"{hw.get('name')} ({hw.get('devices')} device(s), {hw.get('placement')}; modelled clock)"
    return f"{hw.get('cpu') or hw.get('machine') or 'this machine'} (wall clock)"


def settings_lines(records: list[Record]) -> list[str]:
    """What shapes the table's numbers: budget, hardware and placement, and per strategy the params every one of
    its points shares (those that differ from the defaults; the labels name the rest)."""
    def one(fn: Callable[[Record], str]) -> str:
        vals = list(dict.fromkeys(fn(r) for r in records))
        return vals[0] if len(vals) == 1 else "varies: " + ", ".join(vals)

    lines = [f"new tokens per prompt: {one(_budget)}; hardware: {one(_machine)}"]
    lines += list(dict.fromkeys(r.sampled for r in records if r.sampled))
    for name in dict.fromkeys(r.strategy for r in records):
        recs = [r for r in records if r.strategy == name]
        base = strategy_params(name)
        shared = {k: v for k, v in recs[0].params.items()
                  if base.get(k) != v and all(r.params.get(k) == v for r in recs)}
        if shared:
            lines.append(f"{name} at every point: " + ", ".join(f"{k}={v}" for k, v in shared.items()))
    sims = [r for r in records if r.decisions]
    if sims:
        lines.append("decisions (simulated points): " + one(lambda r: decisions_text(r) if r.decisions else "real"))
        measured = list(dict.fromkeys(b["measured_by"].split(" --")[0] + f", commit {b['commit']}" for r in sims
                                      if (b := (r.decisions or {}).get("band"))))
        floored = sorted({(f["task"], f["prompts"]) for r in sims
                          if (f := ((r.decisions or {}).get("band") or {}).get("prompt_floor"))})
        widened = ("; widened to how far the real figures of this many prompts stray from their task's where that is "
                   "wider (" + ", ".join(f"{t}, {n} prompt{'s' if n > 1 else ''}" for t, n in floored)
                   + "; python -m simulators calibrate floor)") if floored else ""
        lines.append("±: the central 80% of the errors measured for this source and strategy (3 cells or more)"
                     + (f" ({'; '.join(measured)})" if measured else "") + widened
                     + "; ?: not measured" + "".join(
                         f"; {', '.join(names)}: {why}" for why, names in _no_band(sims).items()))
    return lines


def _no_band(sims: list[Record]) -> dict[str, list[str]]:
    """why -> the strategies a simulated table shows `?` for with that reason (the decisions' `no_band`)."""
    out: dict[str, list[str]] = {}
    for r in sims:
        why = (r.decisions or {}).get("no_band")
        if why and r.strategy not in out.setdefault(str(why), []):
            out[str(why)].append(r.strategy)
    return out


def decisions_text(rec: Record) -> str:
    """A simulated record's source of decisions, and where its profile ran off the setting it was fitted on, that
    its band was measured at the fitted one (simulators.trust.off_fit)."""
    d = rec.decisions or {}
    off = d.get("off_fit") or {}
    keys = [k for k in ("task", "hardware", "max_new_tokens") if k in off]

    def side(which: str) -> str:
        return ", ".join(f"{off[k][which]}{' new tokens' if k == 'max_new_tokens' else ''}" for k in keys)

    outside = f"; band measured at {side('fitted')}, not at this run's {side('run')}" if keys else ""
    return f"{d['label']}, {d['fitted_to']}{outside}"


def speedup_ranks(records: list[Record]) -> list[str]:
    """Per record: its rank by speedup among the records of its baseline (a group: one baseline point). A simulated
    point with a measured band: 1 + the number of points of its group whose whole band (band_span: speedup x (1 -/+
    band), clipped at 0) lies above its own, '=' in front where another point's band overlaps its own (a tie, not an
    order); '?' without a measured band (not ranked, nor counted above or below anyone). A wall-clock point (no
    band): 1 + the number of wall-clock points of its group with a higher measured speedup. '-': no speedup, or no
    other point of its kind in its group to rank against."""
    spans = {id(r): sp for r in records if (sp := band_span(r, "speedup"))}
    speeds = {id(r): r.speedup for r in records if r.decisions is None and r.speedup is not None}
    kind = {id(r): "band" if id(r) in spans else "real" if id(r) in speeds else None for r in records}
    ranks = []
    for r in records:
        peers = [id(q) for q in records if q is not r and q.baseline_id == r.baseline_id and kind[id(q)] == kind[id(r)]]
        if kind[id(r)] is None or not peers:   # a simulated speedup without a measured band: '?'
            ranks.append("?" if kind[id(r)] is None and r.speedup is not None else "-")
        elif kind[id(r)] == "real":
            ranks.append(str(1 + sum(speeds[q] > speeds[id(r)] for q in peers)))
        else:
            lo, hi, _ = spans[id(r)]
            tie = any(spans[q][0] <= hi and lo <= spans[q][1] for q in peers)
            ranks.append(("=" if tie else "") + str(1 + sum(spans[q][0] > hi for q in peers)))
    return ranks


def rank_legend(records: list[Record], ranks: list[str]) -> str:
    """What the rank column means (speedup_ranks), naming only the kinds of rank the table shows."""
    kinds = {r.decisions is None for r, k in zip(records, ranks, strict=True) if k[-1:].isdigit()}
    parts = []
    if False in kinds:
        parts.append(("simulated points: " if True in kinds else "") + "1 + how many points have their whole speedup "
                     "band (speedup x (1 ± its ±), clipped at 0) above this point's whole band; '=': another point's "
                     "band overlaps this one's (a tie, not an order)")
    if True in kinds:
        parts.append(("wall-clock points (no band): " if False in kinds else "by measured speedup (wall clock: no "
                      "band): ") + "1 + how many wall-clock points have a higher speedup")
    if "?" in ranks:
        parts.append("?: no measured band: not ranked, nor counted above or below any point")
    if "-" in ranks:
        parts.append("-: no speedup, or no other point of its baseline to rank against")
    return "rank, within the points measured against one baseline: " + "; ".join(parts)


def format_table(records: list[Record]) -> str:
    banded = any(r.decisions for r in records)
    ranks = speedup_ranks(records)
    ranked = any(k[-1:].isdigit() for k in ranks)   # a rank column only where two points of a group compare
    w = max([43, *(len(r.label) for r in records)]) + 1   # the point column: the longest name, never cut
    bands = {m: [band_text(r, m, "*") or "-" for r in records] for m in ("speedup", "block_efficiency")}
    bw = {m: max([5, *(len(t) for t in texts)]) + 1 for m, texts in bands.items()}   # '±101%*' widens it
    head = (f"{'point':<{w}}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'speedup':>9}{'±':>{bw['speedup']}}"
            f"{'SB spd':>8}{'eta':>7}{'±':>{bw['block_efficiency']}}{'A':>7}{'#Match':>8}{'same':>11}" if banded else
            f"{'point':<{w}}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'speedup':>9}{'SB spd':>8}{'eta':>7}{'A':>7}"
            f"{'#Match':>8}{'same':>11}") + (f"{'rank':>6}" if ranked else "")
    legend = [rank_legend(records, ranks)] if ranked else []
    lines = [*settings_lines(records), *legend, head, "-" * len(head)] if records else [head, "-" * len(head)]
    for i, r in enumerate(records):
        t, sp, sb = r.totals, r.speedup, r.speedup_specbench
        spd, eta = f"{'-' if sp is None else f'{sp:.2f}x':>9}", f"{t['block_efficiency']:>7.2f}"
        if banded:
            spd += f"{bands['speedup'][i]:>{bw['speedup']}}"
            eta += f"{bands['block_efficiency'][i]:>{bw['block_efficiency']}}"
        lines.append(f"{r.label:<{w}}{t['new_tokens']:>8}{r.seconds:>10.3f}{r.rate:>10.1f}"
                     f"{spd}{'-' if sb is None else f'{sb:.2f}x':>8}{eta}"
                     f"{t['accepted_length']:>7.2f}{t['match_per_forward']:>8.2f}"
                     f"{r.identical_to_baseline or ('sampled' if r.sampled else '-'):>11}"
                     + (f"{ranks[i]:>6}" if ranked else ""))
    lines.append("speedup: baseline time / time (the paper's); SB spd: mean per-prompt tok/s over the baseline's "
                 "(Spec-Bench's)")
    for m, texts in bands.items():
        if any(t.endswith("*") for t in texts):
            lines.append(f"*: clipped at {BAND_NAMES[m]} {BAND_FLOORS[m]:g}: {BAND_NAMES[m]} cannot be lower, so "
                         f"that band runs from {BAND_FLOORS[m]:.2f} to {BAND_NAMES[m]} x (1 + ±)")
    lines += process_lines(records) + baseline_lines(records)
    served = [(r, r.serving) for r in records if r.serving]
    if served:
        lines.append("served points (serve.concurrency): seconds = makespan, tok/s = throughput, speedup = the "
                     "baseline's makespan / this one's at the same load")
        head2 = (f"{'served point':<{w}}{'C':>5}{'batch':>7}{'latency p50':>13}{'p99':>8}{'TTFT p50':>10}"
                 f"{'TPOT p50':>10}")
        lines += [head2, "-" * len(head2)]
        for r, sv in served:
            lines.append(f"{r.label:<{w}}{sv['concurrency']:>5}{sv['mean_batch']:>7.1f}"
                         f"{sv['latency_s_p50']:>13.3f}{sv['latency_s_p99']:>8.3f}{sv['ttft_s_p50']:>10.3f}"
                         f"{sv['tpot_s_p50']:>10.4f}")
    lines += peer_ratio_lines(records)
    for r in records:
        for d in r.divergences or []:
            m = "?" if d["margin"] is None else f"{d['margin']:.3f}"
            lines.append(f"differs: {r.label} prompt {d['prompt_id']} at output position {d['position']} "
                         f"(baseline {d['baseline_token']}, this {d['other_token']}); target top-2 logit margin {m}")
    return "\n".join(lines)


def process_lines(records: list[Record]) -> list[str]:
    """A wall-clock row whose prompts were timed by two or more processes (a resumed point, each prompt's pair from
    one process): how many prompts each process timed and, against a baseline, each process's own speedup and
    their mean; the row's speedup adds the pairs of all, timed under whatever load each process had."""
    lines = []
    for r in records:
        counts = r.timed_by
        if len(counts) < 2:
            continue
        per = r.process_speedups or {}
        parts = [f"{n} by process {proc or '?'}" + (f" ({per[proc]:.2f}x)" if proc in per else "")
                 for proc, n in counts.items()]
        tail = ""
        if per and r.speedup is not None:
            mean = sum(per.values()) / len(per)
            tail = (f"; its speedup {r.speedup:.2f}x adds the pairs of all; the mean of the per-process speedups is "
                    f"{mean:.2f}x")
        lines.append(f"resumed: {r.label}: its {len(r.prompts)} prompts were timed by {len(counts)} processes "
                     f"({', '.join(parts)}){tail}")
    return lines


def baseline_lines(records: list[Record]) -> list[str]:
    """A row whose speedup was measured against another record of its baseline point than the one in the table
    (the baseline measured again since): which record, so that the baseline's times shown and the speedup are not
    read together (ouroboros.sweep adds the row of the record used where it can read it). A record older than
    `baseline_record`: a note where the speedup is not the shown baseline's time over its own."""
    ids = {r.record_id for r in records}
    lines = []
    for r in records:
        shown = next((q for q in records if q.point_id == r.baseline_id and q.point_id != r.point_id), None)
        if shown is None or r.baseline_record in ids or r.speedup is None:
            continue
        if r.baseline_record:
            lines.append(f"baseline: {r.label}: its speedup is against {shown.label} record "
                         f"{r.baseline_record[:8]}, not the {shown.label} row shown (record {shown.record_id[:8]}, "
                         "another measurement of that point): those times do not give it")
        elif r.seconds > 0 and abs(shown.seconds / r.seconds - r.speedup) > 1e-6 * r.speedup:
            lines.append(f"baseline: {r.label}: its speedup {r.speedup:.2f}x is not the {shown.label} row's time over "
                         f"its own ({shown.seconds / r.seconds:.2f}x): it was measured against another record of "
                         f"{shown.label} (this record does not name which)")
    return lines


def peer_ratio_lines(records: list[Record]) -> list[str]:
    """ours / peer tokens per second, for each of our points and each point of the peer doing the same job
    (vanilla / hf_greedy | vllm_greedy, speculative / hf_assisted | vllm_draft, pld / hf_pld | vllm_ngram, suffix /
    vllm_suffix) measured on the same backend and prompts. A vLLM peer is timed by its own worker process: its ratio
    is shown only where the prompts alternated between the processes (interleaved), with a line saying how it was
    paired, and vLLM's own acceptance counts."""
    lines: list[str] = []
    served = [r for r in records if r.strategy in PEERS and r.serving]
    if served:   # a serve cannot alternate prompt by prompt: its throughput stands beside ours, no ratio
        lines.append(f"served peers ({', '.join(r.label for r in served)}): vLLM's worker timed each serve, this "
                     "process timed ours, one point after another (a serve cannot alternate prompt by prompt): their "
                     "throughputs stand side by side in the served table; no ours/peer ratio")
        for peer in served:
            lines += vllm_lines(peer, False)[1:]
    for peer in (r for r in records if r.strategy in PEERS and not r.serving):
        vllm = PEERS[peer.strategy].engine == "vllm"
        alternated = peer.config.get("interleave") is not False
        for ours in (r for r in records if r.strategy == PEERS[peer.strategy].counterpart):
            if ours.baseline_id != peer.baseline_id:
                continue   # measured against another baseline (other prompts, models or budget): no ratio
            a, b = ours.totals["tokens_per_s"], peer.totals["tokens_per_s"]
            if vllm and not alternated:
                lines.append(f"ours/peer: {ours.label} / {peer.label}: no ratio: vLLM's times come from its worker "
                             "process, and the prompts did not alternate between the processes (interleave=false)")
                continue
            lines.append(f"ours/peer: {ours.label} / {peer.label}: {a:.2f} / {b:.2f} tok/s = "
                         f"{a / b if b else float('nan'):.3f}x")
        if vllm:
            lines += vllm_lines(peer, alternated)
    return lines


def vllm_lines(peer: Record, alternated: bool) -> list[str]:
    """How a vLLM peer's times pair with ours, and vLLM's own acceptance counts (its `vllm:spec_decode_*` metrics,
    summed over the prompts: ouroboros/vllm/client.py)."""
    how = ("the prompts alternated between the two processes, prompt by prompt, on one machine" if alternated else
           "the prompts did not alternate (interleave=false): no ratio with our points")
    lines = [f"paired: {peer.label}: two processes' clocks: vLLM's worker timed each of its requests, this process "
             f"timed ours; {how}"]
    st = peer.totals.get("proposer_stats", {})
    drafts, proposed, accepted = (st.get(f"vllm.{k}") for k in ("num_drafts", "num_draft_tokens",
                                                                 "num_accepted_tokens"))
    if drafts:
        per_pos = [int(st[k]) for k in sorted((k for k in st if k.startswith("vllm.accepted_at_")),
                                              key=lambda k: int(k.rsplit("_", 1)[1]))]
        lines.append(f"vLLM acceptance: {peer.label}: {accepted:.0f} of {proposed:.0f} draft tokens accepted "
                     f"({accepted / proposed if proposed else 0:.1%}) over {drafts:.0f} drafts; mean acceptance "
                     f"length {1 + accepted / drafts:.2f} (vLLM's: 1 + accepted / drafts); accepted by position "
                     f"{per_pos}")
    return lines
