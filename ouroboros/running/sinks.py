"""Sinks: they only WRITE records computed elsewhere (ouroboros.loop.metrics via ouroboros.running.point.make_record).

- `RecordFile`: the JSONL record file (one JSON object per line, one line per point). Appends are atomic:
  one `os.write` of the whole line under an exclusive flock, then fsync; a line torn by a kill mid-write is
  cut off by the next writer (and ignored by readers), so a record is either wholly there or not at all. A write
  that fails (a full disk) is cut back off at once and raised as one OuroborosError line. A bad line is warned
  about once per process (file, line number, the point it held where its bytes show it), however often it is read.
  `check_records_file`: `out` is new, empty or a records file (checked before any work).
  `index()` maps point_id -> record (the resume index); `claim(point_id)` is a per-point lock so parallel
  workers (joblib) never measure the same point twice; its lock file (in `<records>.locks/`) is removed
  when the claim ends, and the folder with the last one.
- `WandbMirror`: mirrors each record to a wandb run (offline by default: no network, no account; `disabled`
  for tests), and a sweep's table and plots to one summary run.
- `summary_line`: the console line printed when a point finishes.
- `load_records` / `load_sweep_records`: typed `Record`s (ouroboros.running.record) for analysis, reports and tests;
  `read_records`: the same lines as plain JSON objects; `read_wandb_run`: an offline wandb run read back.

Knows nothing of models, strategies or Hydra.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import json
import os
import re
import stat
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.loop.metrics import pool_rates
from ouroboros.running.record import Record

# ----------------------------------------------------------------------------------------------- JSONL records
# the bad lines (file, byte offset, length) already warned about: each is reported once per process, however often
# the file is read (a resume reads it per point) and whether a reader skips it or a writer cuts it
_reported: set[tuple[str, int, int]] = set()
_POINT = re.compile(rb'"(point_id|of_point)"\s*:\s*"([^"\\]{1,64})"')
_LABEL = re.compile(rb'"label"\s*:\s*"([^"\\]{1,120})"')


def _whose(line: bytes) -> str:
    """'point 3ed1443fdb5b8a6a (pld)' where the raw line shows whose it is (a prompt line: 'a prompt of point ...'),
    else ''."""
    m = _POINT.search(line)
    if m is None:
        return ""
    label = _LABEL.search(line)
    who = f"{'a prompt of ' if m.group(1) == b'of_point' else ''}point {m.group(2).decode('utf-8', 'replace')}"
    return who + (f" ({label.group(1).decode('utf-8', 'replace')})" if label else "")


def _first_report(where: str, offset: int, line: bytes) -> bool:
    """Whether this bad line (of file `where`, at byte `offset`) is not yet reported in this process (it is now)."""
    key = (os.path.realpath(where), offset, len(line))
    new = key not in _reported
    _reported.add(key)
    return new


def _parse_lines(data: bytes, where: str) -> list[dict]:
    out, bad, new = [], [], False
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline; else a torn last line
    offset = 0
    for n, line in enumerate(lines, 1):
        at, offset = offset, offset + len(line) + 1
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:   # JSONDecodeError (torn), UnicodeDecodeError (not UTF-8)
            why, whose = "not UTF-8" if isinstance(e, UnicodeDecodeError) else "not JSON", _whose(line)
            bad.append(f"line {n} ({why}{', ' + whose if whose else ''})")
            new |= _first_report(where, at, line)
    if tail.strip():
        whose = _whose(tail)
        bad.append(f"line {len(lines) + 1} (incomplete: cut off by an interrupted write"
                   f"{', ' + whose if whose else ''})")
        new |= _first_report(where, offset, tail)
    if bad and new:
        warnings.warn(f"{where}: skipped {len(bad)} undecodable or incomplete line(s): {', '.join(bad)}",
                      stacklevel=3)
    return out


def read_records(path: str | os.PathLike) -> list[dict]:
    """Records from a .jsonl file or every *.jsonl under a folder (sorted by path, then file order)."""
    return [r for r in read_lines(path) if "point_id" in r]


def load_records(path: str | os.PathLike) -> list[Record]:
    """`read_records` as typed records."""
    return [Record.from_json(r) for r in read_records(path)]


def load_sweep_records(path: str | os.PathLike) -> list[Record]:
    """`load_records`, plus for every sweep manifest (`sweep_manifest`) that names a point recorded under another
    sweep, a copy of that record under the manifest's sweep and label: a point two sweeps share (measured once,
    resumed by the second) shows in both sweeps' tables and plots."""
    lines = read_lines(path)
    records = [Record.from_json(r) for r in lines if "point_id" in r]
    latest = {r.point_id: r for r in records}
    seen = {(r.point_id, r.sweep) for r in records}
    for m in (x for x in lines if x.get("kind") == "sweep_manifest"):
        sweep = str(m.get("sweep") or "")
        for pid, label in m.get("points", []):
            if pid in latest and (pid, sweep) not in seen:
                records.append(latest[pid].named(label, sweep))
                seen.add((pid, sweep))
    return records


def prompt_line(point_id: str, prompt: dict, process: str | None = None, code: str | None = None) -> dict:
    """The line a point appends after each finished prompt (readers of records skip it: no `point_id` key), so a
    run killed at any moment resumes at prompt granularity (`RecordFile.finished_prompts`); `process`: the id of
    the process that timed it (a wall-clock speedup pairs only prompts of one process); `code`: the code that
    decoded it (ouroboros.running.point.code_version; a resume reuses only its own code's lines)."""
    return {"kind": "prompt_result", "of_point": point_id, "prompt": prompt, "time": time.time(),
            **({"process": process} if process else {}), **({"code": code} if code else {})}


def record_code(record: dict) -> str | None:
    """The code a record was measured with (`versions.code`; None: a record older than the fingerprint)."""
    return (record.get("versions") or {}).get("code")


def sweep_manifest(sweep: str, points: list[tuple[str, str]]) -> dict:
    """The line a sweep appends when it ends: its name and its (point_id, label) pairs, measured or resumed."""
    return {"kind": "sweep_manifest", "sweep": sweep, "points": [list(p) for p in points], "time": time.time()}


def record_files(path: str | os.PathLike) -> list[Path]:
    """The records files `path` names: itself, or every .jsonl file under a folder (sorted)."""
    p = Path(path)
    if p.is_dir():
        return sorted(p.rglob("*.jsonl"))
    if not p.exists():
        raise OuroborosError(f"no records at {str(path)!r}")
    mode = p.stat().st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):   # /dev/zero, /dev/full: endless bytes, never a records file
        raise OuroborosError(f"{str(path)!r} is a device, not a records file")
    return [p]


def read_lines(path: str | os.PathLike) -> list[dict]:
    """Every JSON line of a records file, or of every .jsonl file under a folder: point records, prompt results
    and sweep manifests alike."""
    out: list[dict] = []
    for f in record_files(path):
        out += [r for r in _parse_lines(f.read_bytes(), str(f)) if isinstance(r, dict)]
    return out


_RECORD_START = re.compile(rb'\s*\{\s*"(schema|record_id|point_id|kind)"\s*:')


def check_records_file(path: str | os.PathLike, what: str = "out") -> None:
    """Raise OuroborosError (one line, naming the option `what`) when `path` is a non-empty file whose first line is
    not a record, prompt line or manifest (a saved document, a dataset, a text file): appending would mix records
    into it. Missing or empty: fine; devices and pipes: ouroboros.paths.check_regular."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        return   # a folder: check_writable says so
    with open(p, "rb") as f:
        head = f.read(1 << 20)
    head = head.lstrip()
    if not head:
        return
    first = head.partition(b"\n")[0]
    try:
        obj = json.loads(first)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        ok = "point_id" in obj or "kind" in obj
    else:   # a first line cut off by an interrupted write, corrupt, or longer than the window: how it starts
        ok = obj is None and _RECORD_START.match(first) is not None
    if not ok:
        raise OuroborosError(f"{what}: {str(path)!r} exists and is not a records file (its first line is not a "
                             "record): appending would mix records into it; remove it or pick another path")


class RecordFile:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def records(self) -> list[dict]:
        return read_records(self.path) if self.path.exists() else []

    def prompt_lines(self, point_id: str, code: str | None = None) -> list[dict]:
        """The prompt lines of `point_id` (its prompts finished before a stop), oldest first; with `code`, only
        those written by that code (`prompt_line`)."""
        if not self.path.exists():
            return []
        return [ln for ln in read_lines(self.path) if ln.get("kind") == "prompt_result"
                and ln.get("of_point") == point_id and (code is None or ln.get("code") == code)]

    def finished_prompts(self, point_id: str, code: str | None = None) -> dict[str, dict]:
        """prompt_id -> the latest prompt line of `point_id` (of `code`'s, when given)."""
        return {ln["prompt"]["prompt_id"]: ln["prompt"] for ln in self.prompt_lines(point_id, code)}

    def finished_processes(self, point_id: str, code: str | None = None) -> dict[str, str]:
        """prompt_id -> the process that timed the latest prompt line of `point_id` ('' for lines without one)."""
        return {ln["prompt"]["prompt_id"]: str(ln.get("process") or "") for ln in self.prompt_lines(point_id, code)}

    def index(self, code_of: Callable[[str], str | None] | None = None) -> dict[str, dict]:
        """point_id -> its latest record (the resume index); with `code_of`, a point's latest record written by
        the code `code_of(point_id)` names (None: any code)."""
        out = {}
        for r in self.records():
            want = code_of(r["point_id"]) if code_of is not None else None
            if want is None or record_code(r) == want:
                out[r["point_id"]] = r
        return out

    def append(self, record: dict) -> None:
        """Append one line; a failed write (a full disk, ...) is cut back off and raised as one OuroborosError line,
        so the file is as it was before the call."""
        line = (json.dumps(record, separators=(",", ":"), default=_json_default) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise OuroborosError(f"out: cannot append to {str(self.path)!r} ({_why(e)}); nothing was written") from None
        size = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _cut_torn_tail(fd, str(self.path))
            size = os.fstat(fd).st_size
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as e:
            kept = size is not None and _truncate(fd, size)
            raise OuroborosError(f"out: cannot append to {str(self.path)!r} ({_why(e)}); "
                                 f"{'nothing was written' if kept else 'a rerun cuts the partial line'}") from None
        finally:
            os.close(fd)  # releases the flock

    @contextmanager
    def claim(self, point_id: str, code: str | None = None) -> Iterator[dict | None]:
        """Hold point_id's lock; yields its record (of `code`, when given) if another worker finished it meanwhile,
        else None."""
        lock_dir = self.path.parent / (self.path.name + ".locks")
        lock = lock_dir / f"{point_id}.lock"
        while True:   # the holder removes the lock file (and the folder) when done: lock the file that is there
            try:
                lock_dir.mkdir(parents=True, exist_ok=True)
            except FileExistsError:     # the folder went away between mkdir's attempt and its check: again
                continue
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:   # the folder went away between mkdir and open
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)              # we waited on a file its holder has since removed: take the new one
        try:
            yield self.index(lambda _: code).get(point_id)
        finally:
            lock.unlink(missing_ok=True)
            try:
                lock_dir.rmdir()      # only when no other claim is held
            except OSError:
                pass
            os.close(fd)


def _why(e: OSError) -> str:
    return e.strerror or (errno.errorcode.get(e.errno, "") if e.errno else "") or type(e).__name__


def _truncate(fd: int, size: int) -> bool:
    """Cut the file back to `size` bytes (a write that failed part-way); whether that worked."""
    try:
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        return True
    except OSError:
        return False


def _cut_torn_tail(fd: int, where: str) -> None:
    """Drop a partial last line (left by a kill mid-write) so the next record starts on its own line; warn unless
    a reader has already reported that line."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    back = min(size, 1 << 20)
    chunk = os.pread(fd, back, size - back)
    cut = chunk.rfind(b"\n")
    keep = size - back + cut + 1 if cut >= 0 else (0 if back == size else size)
    if keep == size:   # a last line longer than the window: left whole
        return
    tail = chunk[cut + 1:]
    os.ftruncate(fd, keep)
    if _first_report(where, keep, tail):
        whose = _whose(tail)
        warnings.warn(f"{where}: dropped a torn record line ({size - keep} bytes{', ' + whose if whose else ''}) "
                      "left by an interrupted write", stacklevel=3)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):          # numpy / torch scalars
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


# ----------------------------------------------------------------------------------------------- console
# the least each figure with a band can take: a band is clipped there (eta counts the tokens of a forward: >= 1)
BAND_FLOORS = {"block_efficiency": 1.0, "speedup": 0.0, "tokens_per_s": 0.0}
BAND_NAMES = {"block_efficiency": "eta", "speedup": "speedup", "tokens_per_s": "tok/s"}


def band_span(rec: Record, metric: str) -> tuple[float, float, bool] | None:
    """(low, high, clipped): the figure x (1 -/+ its measured band), the low end clipped at what the figure can take
    (BAND_FLOORS: eta >= 1, a speedup >= 0); None without a measured band (or a figure)."""
    b = rec.band(metric)
    v = rec.speedup if metric == "speedup" else rec.totals.get(metric)
    if b is None or v is None:
        return None
    low, floor = v * (1 - b), BAND_FLOORS.get(metric, 0.0)
    return max(low, floor), v * (1 + b), low < floor


def band_text(rec: Record, metric: str, mark: str = "") -> str | None:
    """'±24%' (a simulated record's measured error band of `metric`), '?' (simulated, unmeasured) or None (a real
    measurement: no band); `mark` appended where the band reaches below what the figure can take (band_span: it is
    clipped there, the ± staying the measured error)."""
    if rec.decisions is None:
        return None
    b = rec.band(metric)
    if b is None:
        return "?"
    span = band_span(rec, metric)
    return f"±{b:.0%}" + (mark if span and span[2] else "")


def summary_line(rec: Record, done: int | None = None, total: int | None = None) -> str:
    t = rec.totals
    sp = rec.speedup
    head = f"[{done}/{total}] " if done is not None else ""
    same = rec.identical_to_baseline
    tail = f", identical {same}" if same else (", sampled: outputs not compared" if rec.sampled else "")
    clock = rec.clock
    sv = rec.serving
    if sv:
        return (f"{head}{rec.label} @ concurrency {sv['concurrency']}: {sv['throughput_tok_s']:.1f} tok/s "
                f"(mean batch {sv['mean_batch']:.1f}), speedup {'-' if sp is None else f'{sp:.2f}x'}, latency p50 "
                f"{sv['latency_s_p50']:.2f} / p99 {sv['latency_s_p99']:.2f} {clock} s, eta {t['block_efficiency']:.2f}"
                f", {sv['requests']} requests{tail}")
    d = rec.decisions

    def pm(metric: str) -> str:   # a simulated figure's measured band, and its range where clipped
        span = band_span(rec, metric)
        clip = (f" ({span[0]:.2f}-{span[1]:.2f}, clipped at {BAND_NAMES[metric]} {BAND_FLOORS[metric]:g})"
                if span and span[2] else "")
        return "" if d is None else f" {band_text(rec, metric)}{clip}"

    src = f" [decisions: {d['label']}]" if d else ""
    return (f"{head}{rec.label}: {t['tokens_per_s']:.1f} tok/s, speedup "
            f"{'-' if sp is None else f'{sp:.2f}x'}{pm('speedup')}, eta {t['block_efficiency']:.2f}"
            f"{pm('block_efficiency')}, A {t['accepted_length']:.2f}, #Match {t['match_per_forward']:.2f}, "
            f"{t['new_tokens']} tokens in "
            f"{t['elapsed_s']:.2f} {clock} s{tail}{src}")


# ----------------------------------------------------------------------------------------------- wandb
def point_metrics(rec: Record) -> dict[str, float]:
    """The scalar metrics a record carries, flattened for wandb (names: group/metric)."""
    t = rec.totals
    m: dict[str, float] = {k: t[k] for k in ("tokens_per_s", "mean_tokens_per_s", "new_tokens", "elapsed_s",
                                              "block_efficiency", "accepted_length", "match_per_forward",
                                              "target_forwards", "draft_forwards", "draft_tokens")}
    for k, v in ((rec.decisions or {}).get("band") or {}).items():
        if isinstance(v, (int, float)) and k != "cells":
            m[f"band/{k}"] = v
    if rec.speedup is not None:
        m["speedup"] = rec.speedup
    if rec.speedup_specbench is not None:
        m["speedup_specbench"] = rec.speedup_specbench
    for k, v in (rec.serving or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            m[f"serving/{k}"] = v
    for k in ("draft_s", "verify_s", "other_s", "prefill_s"):
        m[f"time/{k}"] = t[k]
        m[f"time/{k[:-2]}_frac"] = t[k] / t["elapsed_s"] if t["elapsed_s"] > 0 else 0.0
    for src, n in t.get("accepted_by_source", {}).items():
        m[f"accepted_by_source/{src}"] = n
    for k, v in t.get("proposer_stats", {}).items():
        if isinstance(v, (int, float)):
            m[f"proposer/{k}"] = v
    for k, v in pool_rates(t.get("proposer_stats", {})).items():
        m[f"pool/{k}"] = v
    return m


class WandbMirror:
    """One wandb run per point (grouped by sweep name) + `log_sweep` for the table and plots."""

    def __init__(self, mode: str = "offline", project: str = "ouroboros", entity: str | None = None,
                 dir: str = "runs", tags: list[str] | None = None, group: str | None = None):
        self.mode, self.project, self.entity, self.dir = mode, project, entity, dir
        self.tags, self.group = list(tags or []), group
        self.run_dirs: list[str] = []

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def _init(self, name: str, config: dict, job_type: str):
        import wandb

        os.makedirs(self.dir, exist_ok=True)
        mode: Any = self.mode
        return wandb.init(mode=mode, project=self.project, entity=self.entity, dir=self.dir, group=self.group,
                          name=name, job_type=job_type, config=config, tags=self.tags, reinit="finish_previous",
                          settings=wandb.Settings(silent=True, console="off", save_code=False))

    def log_point(self, rec: Record) -> str | None:
        if not self.enabled:
            return None
        import wandb

        run = self._init(rec.label, {**rec.config, "point_id": rec.point_id,
                                     **({"decisions": rec.decisions} if rec.decisions else {})}, "point")
        try:
            t = rec.totals
            run.define_metric("position")
            run.define_metric("acceptance/*", step_metric="position")
            run.define_metric("prompt_index")
            run.define_metric("prompt/*", step_metric="prompt_index")
            for i, (p, a) in enumerate(zip(t["position_proposed"], t["position_accepted"], strict=True)):
                run.log({"position": i + 1, "acceptance/proposed": p, "acceptance/accepted": a,
                         "acceptance/rate": a / p if p else 0.0})
            for i, pr in enumerate(rec.prompts):
                row: dict[str, Any] = {"prompt_index": i, "prompt/tokens_per_s": pr["tokens_per_s"],
                                       "prompt/block_efficiency": pr["block_efficiency"]}
                row.update({f"prompt/{k}": v for k, v in pr.get("proposer_stats", {}).items()
                            if isinstance(v, (int, float))})
                run.log(row)
            cols: list[str | int] = ["position", "proposed", "accepted"]
            data = [[i + 1, p, a] for i, (p, a) in enumerate(zip(t["position_proposed"], t["position_accepted"],
                                                                  strict=True))]
            run.log({"per_position_acceptance": wandb.Table(columns=cols, data=data)})
            run.summary.update(point_metrics(rec))
            self.run_dirs.append(str(Path(run.dir).parent))
        finally:
            run.finish()
        return self.run_dirs[-1]

    def log_sweep(self, name: str, rows: list[dict], images: dict[str, str] | None = None) -> str | None:
        if not self.enabled or not rows:
            return None
        import wandb

        run = self._init(f"{name}-summary", {"sweep": name, "points": len(rows)}, "sweep")
        try:
            keys = list(rows[0])
            run.log({"sweep_table": wandb.Table(columns=list(keys), data=[[r.get(c) for c in keys] for r in rows])})
            for key, path in (images or {}).items():
                run.log({key: wandb.Image(path)})
            self.run_dirs.append(str(Path(run.dir).parent))
        finally:
            run.finish()
        return self.run_dirs[-1]


# --- reading an offline run back (tests, reports): the .wandb file is a LevelDB-style log of protobuf records
_BLOCK, _HEADER = 32768, 7


def _log_chunks(data: bytes) -> Iterator[bytes]:
    pos, buf = _HEADER, b""  # file header: ":W&B", magic (2 bytes), version (1 byte)
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:          # block trailer padding
            pos += left
            continue
        length = int.from_bytes(data[pos + 4: pos + 6], "little")
        kind = data[pos + 6]
        if pos + _HEADER + length > len(data):  # a record still being written: the file ends mid-record
            return
        chunk = data[pos + _HEADER: pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 1:               # FULL
            yield chunk
        elif kind == 2:             # FIRST
            buf = chunk
        elif kind == 3:             # MIDDLE
            buf += chunk
        elif kind == 4:             # LAST
            yield buf + chunk


def _parse(pb: Any, chunk: bytes) -> Any:
    rec = pb.Record()
    rec.ParseFromString(chunk)
    return rec


def read_wandb_run(run_dir: str | os.PathLike, timeout_s: float = 30.0) -> dict[str, Any]:
    """{config, summary, history} of an offline run directory (offline-run-*)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    files = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    if not files:
        raise FileNotFoundError(f"no run-*.wandb file in {run_dir}")
    # wandb-core may still be flushing after finish() returns (seen under load): wait for the exit record.
    # A file read mid-flush can end inside a record, or hold one not yet complete: read it again.
    deadline = time.monotonic() + timeout_s
    while True:
        data = Path(files[0]).read_bytes()
        try:
            records = [_parse(pb, chunk) for chunk in _log_chunks(data)]
        except DecodeError:
            records = None
        kinds = {rec.WhichOneof("record_type") for rec in records or ()}
        if "exit" in kinds:
            break
        if time.monotonic() > deadline:
            if records is None:
                raise ValueError(f"{files[0]} does not parse as a wandb log after {timeout_s:g} s")
            break
        time.sleep(0.2)
    out: dict[str, Any] = {"config": {}, "summary": {}, "history": []}
    for rec in records or ():
        kind = rec.WhichOneof("record_type")
        if kind in ("config", "run"):   # the config is sent with the run record, updates as config records
            cfg = rec.config if kind == "config" else rec.run.config
            out["config"].update({i.key: json.loads(i.value_json) for i in cfg.update})
        elif kind == "summary":
            out["summary"].update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in rec.summary.update})
        elif kind == "history":
            out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in rec.history.item})
    return out
