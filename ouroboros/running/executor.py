"""The executor: measures points and turns their results into records. It keeps one session per pair and prompt
set (ouroboros.running.session), measures each point's baseline first and once, claims points so parallel workers never
measure one twice, resumes from the record store (ouroboros.running.store) at prompt granularity (a strategy that keeps
state across prompts: the whole point again), pairs wall-clock times by process, interleaves points that share a
session prompt by prompt, and runs served points under load.

Below the entry points (run, sweep, tune): it never parses a command line and never prints a table; a finished
record goes to the store, the wandb mirror and `on_record`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from ouroboros.config import RunConfig
from ouroboros.loop.contracts import ChargesHost
from ouroboros.loop.metrics import PromptResult, RunResult
from ouroboros.running.harness import (
    WARMUP_TOKENS,
    Job,
    PromptRunner,
    StrategyRun,
    StrategyRunner,
    run_interleaved,
    run_prompts,
)
from ouroboros.running.interrupts import interrupts_deferred
from ouroboros.running.point import Point, make_record, request_id
from ouroboros.running.record import Record
from ouroboros.running.session import (
    Session,
    budget_note,
    budgets,
    open_session,
    pair_key,
    proposer_params,
    stock_models,
)
from ouroboros.running.sinks import RecordFile, WandbMirror, summary_line
from ouroboros.running.store import FileStore, RecordStore
from ouroboros.strategies import (
    carries_state,
    check_lengths,
    check_loaded,
    check_trees,
    get_spec,
    is_peer,
    strategy_params,
)

if TYPE_CHECKING:
    from ouroboros.running.peers import PeerRunner


@dataclass
class Executor:
    """Measures points; keeps sessions (one per model/backend/hardware/dataset) and baseline results."""

    store: RecordStore
    mirror: WandbMirror | None = None
    console: bool = True
    sweep: str = "single"
    step_records: bool = False
    on_record: Callable[[Record], None] | None = None
    progress: bool = False      # progress bars (make_executor: logger.progress and stderr is a terminal)
    recorded: int = 0           # records appended by this executor (the interrupt message counts them)
    notes: list[str] = field(default_factory=list)   # `note:` lines printed once `check` has passed
    process: str = field(default_factory=lambda: uuid.uuid4().hex[:12])   # this process's id in wall-clock records
    _sessions: dict[str, Session] = field(default_factory=dict)
    _results: dict[str, RunResult] = field(default_factory=dict)   # point_id -> result measured or reloaded
    _kept: dict[str, dict[str, PromptResult]] = field(default_factory=dict)  # point_id -> prompts decoded here
    # Wall clocks: a speedup's two times must come from one process. _redo: points (and their baselines) measured
    # again here; _reuse: point_id -> prompts decoded by an earlier process that this one may keep (those whose
    # baseline prompt was decoded by that same process); _procs: point_id -> prompt_id -> the process that decoded it
    _redo: set[str] = field(default_factory=set)
    _reuse: dict[str, set[str]] = field(default_factory=dict)
    _procs: dict[str, dict[str, str]] = field(default_factory=dict)
    _planned: set[str] = field(default_factory=set)
    _stateful: set[str] = field(default_factory=set)   # points whose proposer keeps state across prompts
    _base_records: dict[str, str] = field(default_factory=dict)   # point_id -> the record_id of its `_results`
    # the last served peer's runner (its engine alive) and what it was built from: the next served point of the same
    # peer, settings and session reuses it (vLLM's start-up is a minute or more); another one closes it first
    _served_peer: tuple[str, PeerRunner] | None = None

    def session(self, run: RunConfig) -> Session:
        key = pair_key(run) + json.dumps(run.dataset, sort_keys=True, default=str)
        if key not in self._sessions:
            self._sessions[key] = open_session(run)
        return self._sessions[key]

    def check(self, points: list[Point]) -> None:
        """Before anything is measured: load each unfinished point's models and refuse a strategy that would give
        a token tree to a model that scores chains only (one line naming the model type and the reason)."""
        self._plan_wall_clock(points)
        hosts: dict[int, tuple[ChargesHost, dict[str, bool]]] = {}   # modelled clocks: strategy -> served?
        for p in points:
            if self._done(p.id) is None:
                name = p.run.strategy.name
                if not is_peer(name):   # what decides the kind's tokens can decide this strategy (sim: its source)
                    p.run.kind.check_strategy(p.run)
                sess = self.session(p.run)
                if isinstance(sess.target, ChargesHost) and not is_peer(name):
                    served = hosts.setdefault(id(sess.target), (sess.target, {}))[1]
                    served[name] = served.get(name, True) and bool(p.run.serve.concurrency)
                if is_peer(name):
                    from ouroboros.running.peers import check_peer_models

                    check_peer_models(name, stock_models(sess)[1], sess.eos_ids)
                params = None if is_peer(name) else proposer_params(p.run)
                check_trees(name, sess.target, sess.draft if get_spec(name).needs_draft_model else None, params)
                if not is_peer(name):
                    check_lengths(name, strategy_params(name, p.run.strategy.params), sess.context)
                    self.notes += [n for n in check_loaded(name, params, sess.target) if n not in self.notes]
                for note in [*sess.notes, budget_note(sess, budgets(p.run, sess))]:
                    if note and note not in self.notes:
                        self.notes.append(note)
                if p.run.serve.concurrency:   # sim: the KV caches fit; hf: the models take batched forwards
                    p.run.kind.check_serving(p.run, sess, budgets(p.run, sess))
        for target, served in hosts.values():   # what the modelled clock charges of the strategies' host time
            note = target.host_note(list(served), [k for k, v in served.items() if v])
            if note not in self.notes:
                self.notes.append(note)
        for note in self.notes:   # after every check: a bad input stays one error line
            print(f"note: {note}", file=sys.stderr)
        self.notes = []

    def _done(self, pid: str) -> Record | None:
        return None if pid in self._redo else self.store.done(pid)

    @staticmethod
    def wall(run: RunConfig) -> bool:
        """Measured on a wall clock (real models): times from two processes are not comparable."""
        return not run.kind.simulated

    def _plan_wall_clock(self, points: list[Point]) -> None:
        """Which wall-clock points a resumed run may reuse: a recorded point whose every prompt was timed in the
        same process as its baseline's (`paired_processes`); any other is measured again here, and so is its
        baseline (for the prompts it decodes here). Simulated points are deterministic and reused freely.
        First `_plan_state`: which points keep no prompt of a stopped run at all."""
        self._planned.update(p.id for p in points)
        self._plan_code(points)
        self._plan_state(points)
        if not self.store.resuming:
            return
        index = self.store.index()
        for p in points:
            bid = p.baseline_id
            if not self.wall(p.run) or bid is None or p.run.baseline == p.run.strategy.name:
                continue
            rec = index.get(p.id)
            if rec is None or not rec.paired_processes:
                self._redo.update({p.id, bid})
        for bid in {p.baseline_id for p in points if p.id in self._redo and p.baseline_id}:
            deps = [p for p in points if p.baseline_id == bid and p.id in self._redo and p.id != bid]
            base = self.store.finished_processes(bid)
            common = set(base)
            for q in deps:   # prompts q may keep: decoded by the process that decoded the baseline's
                mine = {} if q.id in self._stateful else self.store.finished_processes(q.id)
                common &= {k for k, proc in mine.items() if proc and base.get(k) == proc}
            for pid in [bid, *(q.id for q in deps)]:
                self._reuse[pid] = set(common)

    def _plan_code(self, points: list[Point]) -> None:
        """Each point (and its baseline) is resumed only from what the code that measures it now recorded
        (ouroboros.running.store): a note counts the points whose records an other code made, measured again."""
        for p in points:
            for pid in (p.id, p.baseline_id):
                if pid:
                    self.store.expect(pid, p.code)
        stale = self.store.stale([pid for p in points for pid in (p.id, p.baseline_id) if pid])
        if stale:
            whose = (f"{len(stale)} point(s) have records or prompts made by other code (git "
                     f"{', '.join(sorted(set(stale.values())))}; a default, kernel or fix may differ)")
            note = (f"{whose}: resumed from them, as sweep.resume_any_code=true asks; their figures are not this "
                    "code's" if points[0].run.sweep.resume_any_code else
                    f"{whose}: they are measured again and the old lines stay in the file (sweep.resume_any_code=true "
                    "reuses them)")
            if note not in self.notes:
                self.notes.append(note)

    def _plan_state(self, points: list[Point]) -> None:
        """A point whose strategy keeps state across prompts (`carries_state`: a phrase pool, a suffix tree, a
        recycling matrix, a draft-length schedule) keeps no prompt a stopped run finished: resumed there, its
        proposer would start the remaining prompts without what the earlier ones taught it, and its figures would
        differ from an uninterrupted run's. It is measured whole again (a note says so when there are such prompts)."""
        for p in points:
            if not carries_state(p.run.strategy.name, p.run.strategy.params):
                continue
            self._stateful.add(p.id)
            n = len(self.store.finished_prompts(p.id)) if self.store.resuming and self._done(p.id) is None else 0
            note = (f"{p.label}: {p.run.strategy.name} keeps state across prompts, so the {n} prompt(s) a stopped "
                    "run finished of it are decoded again with the rest (resumed, it would start them cold)")
            if n and note not in self.notes:
                self.notes.append(note)

    def run_point(self, point: Point) -> tuple[Record, bool]:
        """(record, measured now?) for `point`, measuring its baseline first when needed."""
        if point.id not in self._planned:   # a point `check` never saw (the tuner's later stages)
            self._plan_wall_clock([point])
            for note in self.notes:
                print(f"note: {note}", file=sys.stderr)
            self.notes = []
        done = self._done(point.id)
        if done is not None:
            return done, False
        base = self._baseline(point)
        with self._claim(point.id) as other:
            if other is not None:
                return other, False
            rec = self._measure(point, base, point.baseline_id if base is not None else None)
        return rec, True

    def _baseline(self, point: Point) -> RunResult | None:
        """The result of `point`'s baseline, measured first where no one has (None: no baseline, or the point is
        its own)."""
        bid = point.baseline_id
        if bid is None or point.run.baseline == point.run.strategy.name:
            return None
        if bid not in self._results:
            done = self._done(bid)
            if done is None:
                with self._claim(bid) as other:
                    done = other if other is not None else self._measure(point.baseline_point(), None, None)
            self._results.setdefault(bid, done.result())
            self._base_records.setdefault(bid, done.record_id)
        return self._results[bid]

    @contextlib.contextmanager
    def _claim(self, pid: str) -> Iterator[Record | None]:
        """Hold pid's lock; yields the record another worker finished meanwhile, else None. A wall-clock point this
        process measures again (`_redo`) takes no other process's record: its times would not pair with ours."""
        with self.store.claim(pid) as other:
            yield None if pid in self._redo else other

    def interleaved(self, run: RunConfig) -> bool:
        if run.serve.concurrency:   # a served point decodes all its requests together
            return False
        return run.interleave if run.interleave is not None else not run.kind.simulated

    def interleave(self, points: list[Point]) -> None:
        """Decode the unfinished points that share a session (same models and prompts) prompt by prompt in turn,
        when `interleaved(run)`: every point decodes prompt i (in an order rotating with i) before any starts
        prompt i + 1, so background load hits them alike. Each prompt is kept as it finishes (a prompt_result line
        in the records when resuming, else in memory); `run_point` then assembles the records from them."""
        groups: dict[str, list[Point]] = {}
        for p in points:
            if self.interleaved(p.run) and self._done(p.id) is None:
                key = pair_key(p.run) + json.dumps([p.run.dataset, p.run.warmup], sort_keys=True, default=str)
                group = groups.setdefault(key, [])
                if all(q.id != p.id for q in group):
                    group.append(p)
        for group in groups.values():
            if len(group) < 2:
                continue
            with contextlib.ExitStack() as stack:  # claims in one order: two workers never wait on each other
                mine = [p for p in sorted(group, key=lambda q: q.id) if stack.enter_context(self._claim(p.id)) is None]
                order = {q.id: i for i, q in enumerate(group)}
                mine.sort(key=lambda q: order[q.id])
                if len(mine) < 2:
                    continue
                sess = self.session(mine[0].run)
                jobs = [Job(self._runner(p, sess), budgets(p.run, sess), self._finished(p.id), self._keeper(p.id))
                        for p in mine]
                ids = [q.id for q in sess.prompts]
                say = self._round_line(ids, jobs) if self.console else None
                run_interleaved(jobs, [q.ids for q in sess.prompts], ids, mine[0].run.warmup, self.progress, say)

    @staticmethod
    def _round_line(ids: list[str], jobs: list[Job]) -> Callable[[int], None]:
        def say(i: int) -> None:
            done = [(j.runner.label, j.results[ids[i]].elapsed_s) for j in jobs]
            tqdm.write(f"prompt {i + 1}/{len(ids)} {ids[i]}: " + "; ".join(f"{n} {t:.1f} s" for n, t in done))
        return say

    def _runner(self, point: Point, sess: Session) -> PromptRunner:
        run = point.run
        if is_peer(run.strategy.name):   # transformers' own generate, on the same prompts, same record shape
            from ouroboros.running.peers import PeerRunner

            target, draft = stock_models(sess)
            return PeerRunner(run.strategy.name, dict(run.strategy.params), target, draft, sess.eos_ids,
                              point.label, run.sampling)
        return StrategyRunner(StrategyRun(run.strategy.name, proposer_params(run), point.label), sess.target,
                              sess.draft, sess.eos_ids, run.sampling)

    def _finished(self, pid: str) -> dict[str, PromptResult]:
        """Prompts of point `pid` already decoded: by this executor, or (resuming) by a run stopped earlier. On a
        wall clock, an earlier process's prompts only where `_plan_wall_clock` paired them with the baseline's; of a
        strategy that keeps state across prompts (`_plan_state`), none."""
        procs = self._procs.setdefault(pid, {})
        out = dict(self._kept.get(pid, {}))
        procs.update({k: self.process for k in out})
        earlier = self.store.finished_processes(pid) if pid in self._reuse else {}
        stored = {} if pid in self._stateful else self.store.finished_prompts(pid)
        for k, v in stored.items():
            if k in out:
                continue
            if pid in self._redo and k not in self._reuse.get(pid, set()):
                continue   # decoded by another process than its baseline's prompt: decoded again here
            out[k] = v
            procs[k] = earlier.get(k, "")
        return out

    def _keeper(self, pid: str) -> Callable[[PromptResult], None]:
        """Keep each prompt of `pid` as it finishes (appended to the records when resuming: a killed run loses at
        most the prompt it was decoding)."""
        def keep(r: PromptResult) -> None:
            self._kept.setdefault(pid, {})[r.prompt_id] = r
            self._procs.setdefault(pid, {})[r.prompt_id] = self.process
            self.store.keep_prompt(pid, r, self.process)
        return keep

    def _serve(self, point: Point, sess: Session) -> RunResult:
        """A served point (serve.concurrency >= 1): every request decoded under load, continuous batching (ours, or
        a vLLM peer's own)."""
        from ouroboros.serving.batch import Load, Request, engine_for, serve, slot_factory

        run, sv = point.run, point.run.serve
        each = budgets(run, sess)
        n, m = sv.requests or len(sess.prompts), len(sess.prompts)
        reqs = [Request(list(sess.prompts[i % m].ids), each[i % m], request_id(sess.prompts[i % m].id, i // m))
                for i in range(n)]
        load = Load(sv.concurrency, sv.rate, sv.seed)
        if is_peer(run.strategy.name):   # another engine's own batching (vLLM): its scheduler, its prefill
            key = json.dumps([run.strategy.name, dict(run.strategy.params), id(sess)], sort_keys=True, default=str)
            if self._served_peer is not None and self._served_peer[0] != key:
                self._served_peer[1].close()   # one engine at a time: a few fit in memory on a CPU
                self._served_peer = None
            if self._served_peer is None:
                from ouroboros.running.peers import PeerRunner

                runner = self._runner(point, sess)
                assert isinstance(runner, PeerRunner)
                self._served_peer = (key, runner)
            out = self._served_peer[1].serve(reqs, load, run.warmup)
            return RunResult(strategy=point.label, prompts=[s.result for s in out.requests],
                             serving={**out.summary(load), "prefill": "engine"})
        prefill = sv.prefill or ("batched" if run.kind.batched_prefill else "separate")
        draft = sess.draft if get_spec(run.strategy.name).needs_draft_model else None

        def slots():
            return slot_factory(sess.target, draft, run.strategy.name, proposer_params(run), sv.load_aware,
                                sv.max_draft, sv.shared_pool)
        if run.warmup:   # one short request on a throw-away slot: allocations and kernel choice off the clock
            serve([Request(reqs[0].prompt, min(WARMUP_TOKENS, reqs[0].budget), "warmup")], Load(1),
                  engine_for(sess.target, prefill), slots(), sess.eos_ids)
        out = serve(reqs, load, engine_for(sess.target, prefill), slots(), sess.eos_ids)
        return RunResult(strategy=point.label, prompts=[s.result for s in out.requests],
                         serving={**out.summary(load), "prefill": prefill})

    def _measure(self, point: Point, base: RunResult | None, baseline_id: str | None) -> Record:
        run = point.run
        sess, wall = self.session(run), self.wall(run)
        if run.serve.concurrency:
            result = self._serve(point, sess)
        else:
            result = run_prompts(self._runner(point, sess), [p.ids for p in sess.prompts], budgets(run, sess),
                                 [p.id for p in sess.prompts], run.warmup, self.progress, self._finished(point.id),
                                 self._keeper(point.id))
        used = self._base_records.get(baseline_id) if baseline_id is not None else None
        if run.strategy.name == run.baseline:
            base, baseline_id, used = result, point.id, None
        self._redo.discard(point.id)
        rec = make_record(run, result, sess, label=point.label, baseline=base, baseline_id=baseline_id,
                          sweep=self.sweep, step_records=self.step_records, baseline_record=used)
        self._results[point.id], self._base_records[point.id] = result, rec.record_id
        if wall:   # which process timed each prompt, and whether the baseline's were timed alike
            rec = self._timed_by(rec, point.id, baseline_id, base)
        with interrupts_deferred():   # a Ctrl-C here waits: the record and its wandb run land together
            self.store.save(rec)
            if self.mirror is not None:
                self.mirror.log_point(rec)
            self.recorded += 1
        if self.on_record is not None:
            self.on_record(rec)
        return rec

    def _timed_by(self, rec: Record, pid: str, baseline_id: str | None, base: RunResult | None) -> Record:
        """`rec` with the process that timed each prompt, and (against a baseline) whether the baseline's prompts
        were timed by the same processes. Prompts timed by two or more processes (a resumed point): how many, and
        against another point's baseline, each process's own speedup (the baseline's time over this point's, on
        the prompts that process timed): the record's speedup adds pairs timed under different loads."""
        procs = self._procs.get(pid, {})
        mine = {p["prompt_id"]: procs.get(p["prompt_id"], self.process) for p in rec.prompts}
        paired = None
        if baseline_id is not None:
            theirs = self._procs.get(baseline_id, {}) if baseline_id != pid else mine
            paired = all(theirs.get(k, self.process) == v for k, v in mine.items())
        rec = dataclasses.replace(rec, processes=mine, paired_processes=paired)
        if len(rec.timed_by) < 2:
            return rec
        per = None
        if base is not None and baseline_id != pid and rec.serving is None:
            b = {q.prompt_id: q.elapsed_s for q in base.prompts}
            t = {q["prompt_id"]: q["elapsed_s"] for q in rec.prompts}
            per = {proc: sum(b[k] for k, v in mine.items() if v == proc)
                   / sum(t[k] for k, v in mine.items() if v == proc) for proc in rec.timed_by}
        return dataclasses.replace(rec, timed_in_processes=len(rec.timed_by), process_speedups=per)


def make_executor(run: RunConfig, resume: bool, sweep: str) -> Executor:
    """The executor a run, sweep or tuning job uses: records in `run.out` (resumed from when `resume`), wandb as
    `run.logger` says, a summary line per finished point on the console."""
    w = run.logger.wandb
    mirror = WandbMirror(w.mode, w.project, w.entity, w.dir, w.tags, group=sweep)
    say = (lambda rec: tqdm.write(summary_line(rec))) if run.logger.console else None
    store = FileStore(RecordFile(run.out) if run.out else None, resume, any_code=run.sweep.resume_any_code)
    return Executor(store, mirror, run.logger.console, sweep, run.logger.step_records, on_record=say,
                    progress=run.logger.console and run.logger.progress and sys.stderr.isatty())

