"""The console table a run, a sweep or the tuner prints at the end: one row per record (tokens, seconds, tok/s,
speedup, Spec-Bench speedup, eta, A, #Match, identical outputs; simulated points add their measured error bands and
a rank), the settings every row shares above it, served points' latencies, ours/peer ratios and divergences below,
and a note for each row whose figures need one: prompts timed by two or more processes (a resumed wall-clock point),
a speedup measured against another record of its baseline than the one shown. Names are never cut: the point column
widens to the longest.

Reads `Record`s only; every figure comes from the record (computed once, by ouroboros.metrics). The analysis
package writes the Markdown / CSV tables from the same records (analysis.report).
"""

from __future__ import annotations

from collections.abc import Callable

from ouroboros.config import strategy_params
from ouroboros.peer_configs import PEERS
from ouroboros.record import Record
from ouroboros.sinks import band_text


def _budget(rec: Record) -> str:
    b = rec.max_new_tokens
    if b is None:
        return "?"
    return str(b) if isinstance(b, int) else f"{min(b)}-{max(b)} (per prompt)"


def _machine(rec: Record) -> str:
    hw = rec.hardware or {}
    if rec.backend == "sim":
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
        lines.append("±: the central 80% of the errors measured for this source and strategy (the largest where "
                     "fewer than 3)" + (f" ({'; '.join(measured)})" if measured else "") + widened
                     + "; ?: not measured. rank: by speedup, '=' where bands overlap (a tie, not an order)")
    return lines


def decisions_text(rec: Record) -> str:
    d = rec.decisions or {}
    return f"{d['label']}, {d['fitted_to']}"


def speedup_ranks(records: list[Record]) -> list[str]:
    """Per record: its rank by speedup among the records of its baseline, counting only the points whose whole band
    lies above its own ('=' marks a rank it shares: overlapping bands are a tie); '?' without a measured band."""
    def interval(r: Record) -> tuple[float, float] | None:
        sp, b = r.speedup, r.band("speedup")
        return None if sp is None or b is None else (sp * (1 - b), sp * (1 + b))

    spans = [interval(r) for r in records]
    ranks = []
    for r, me in zip(records, spans, strict=True):
        if me is None:
            ranks.append("?" if r.decisions else "-")
            continue
        peers = [s for q, s in zip(records, spans, strict=True) if s is not None and q.baseline_id == r.baseline_id]
        ranks.append(str(1 + sum(s[0] > me[1] for s in peers)))
    shared = {k for k in ranks if k.isdigit() and ranks.count(k) > 1}
    return ["=" + k if k in shared else k for k in ranks]


def format_table(records: list[Record]) -> str:
    banded = any(r.decisions for r in records)
    w = max([43, *(len(r.label) for r in records)]) + 1   # the point column: the longest name, never cut
    head = (f"{'point':<{w}}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'speedup':>9}{'±':>6}{'SB spd':>8}{'eta':>7}"
            f"{'±':>6}{'A':>7}{'#Match':>8}{'same':>11}{'rank':>6}" if banded else
            f"{'point':<{w}}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'speedup':>9}{'SB spd':>8}{'eta':>7}{'A':>7}"
            f"{'#Match':>8}{'same':>11}")
    lines = [*settings_lines(records), head, "-" * len(head)] if records else [head, "-" * len(head)]
    ranks = speedup_ranks(records) if banded else []
    for i, r in enumerate(records):
        t, sp, sb = r.totals, r.speedup, r.speedup_specbench
        spd, eta = f"{'-' if sp is None else f'{sp:.2f}x':>9}", f"{t['block_efficiency']:>7.2f}"
        if banded:
            spd += f"{band_text(r, 'speedup') or '-':>6}"
            eta += f"{band_text(r, 'block_efficiency') or '-':>6}"
        lines.append(f"{r.label:<{w}}{t['new_tokens']:>8}{r.seconds:>10.3f}{r.rate:>10.1f}"
                     f"{spd}{'-' if sb is None else f'{sb:.2f}x':>8}{eta}"
                     f"{t['accepted_length']:>7.2f}{t['match_per_forward']:>8.2f}"
                     f"{r.identical_to_baseline or ('sampled' if r.sampled else '-'):>11}"
                     + (f"{ranks[i]:>6}" if banded else ""))
    lines.append("speedup: baseline time / time (the paper's); SB spd: mean per-prompt tok/s over the baseline's "
                 "(Spec-Bench's)")
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
    (vanilla / hf_greedy, speculative / hf_assisted, pld / hf_pld) measured on the same backend and prompts."""
    lines = []
    for peer in (r for r in records if r.strategy in PEERS):
        for ours in (r for r in records if r.strategy == PEERS[peer.strategy].counterpart):
            if ours.baseline_id != peer.baseline_id:
                continue   # measured against another baseline (other prompts, models or budget): no ratio
            a, b = ours.totals["tokens_per_s"], peer.totals["tokens_per_s"]
            lines.append(f"ours/peer: {ours.label} / {peer.label}: {a:.2f} / {b:.2f} tok/s = "
                         f"{a / b if b else float('nan'):.3f}x")
    return lines
