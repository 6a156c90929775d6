"""What the executor asks of the records: the resume index, per-point claims, saving a record, keeping each prompt
as it finishes, and a sweep's manifest. `RecordStore` is that interface; `FileStore` puts it in front of the JSONL
record file (ouroboros.running.sinks.RecordFile), turning its JSON lines into typed `Record`s and back.

Without resume (or without a file) nothing is read back: `done` and `claim` find nothing, no prompt lines are
kept, and a measured record is still appended when there is a file. Knows nothing of models or of measuring.

A resume reuses only records and prompt lines of the code that would measure the point now (`expect`: its code
fingerprint, ouroboros.running.point.code_version): a record an earlier version measured is not this version's
figure (a default, a kernel or a fix changed since), so the point is measured again and the old record stays in
the file; `stale` names such points for the run's note. `any_code` (sweep.resume_any_code) reuses them all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Protocol

from ouroboros.loop.metrics import PromptResult, prompt_dict, prompt_from_dict
from ouroboros.running.record import Record
from ouroboros.running.sinks import RecordFile, prompt_line, read_lines, record_code, sweep_manifest


class RecordStore(Protocol):
    @property
    def resuming(self) -> bool:
        """Whether earlier records and prompt lines are read back (resume on, and a file to read)."""
        ...

    def index(self) -> dict[str, Record]:
        """point_id -> its latest record ({} when not resuming)."""
        ...

    def done(self, point_id: str) -> Record | None:
        """The point's latest record (None when not resuming)."""
        ...

    def claim(self, point_id: str) -> AbstractContextManager[Record | None]:
        """Hold the point's lock (parallel workers); yields the record another worker finished meanwhile."""
        ...

    def save(self, rec: Record) -> None: ...

    def keep_prompt(self, point_id: str, prompt: PromptResult, process: str) -> None:
        """Keep one finished prompt of a point (a killed run resumes at prompt granularity)."""
        ...

    def finished_prompts(self, point_id: str) -> dict[str, PromptResult]: ...

    def finished_processes(self, point_id: str) -> dict[str, str]:
        """prompt_id -> the process that timed it ('' when the line names none)."""
        ...

    def save_manifest(self, sweep: str, points: list[tuple[str, str]]) -> None:
        """A sweep's (point_id, label) pairs, measured or resumed (ouroboros.running.sinks.sweep_manifest)."""
        ...

    def expect(self, point_id: str, code: str) -> None:
        """The code that measures `point_id` now: only its records and prompt lines are read back."""
        ...

    def stale(self, point_ids: list[str]) -> dict[str, str]:
        """point_id -> the git commit (or "unknown") of the latest record or prompt line an other code wrote, for
        the points with nothing of their own code to resume ({} when not resuming). With `any_code` these are
        the points resumed from an other code's lines."""
        ...


class FileStore:
    """`RecordStore` over a JSONL record file (`file` None: records are not written anywhere)."""

    def __init__(self, file: RecordFile | None, resume: bool, any_code: bool = False):
        self.file, self.resume, self.any_code = file, resume, any_code
        self.codes: dict[str, str] = {}

    @property
    def resuming(self) -> bool:
        return self.resume and self.file is not None

    def _code(self, point_id: str) -> str | None:
        """The code a record of `point_id` must have been measured with to be reused (None: any)."""
        return None if self.any_code else self.codes.get(point_id)

    def expect(self, point_id: str, code: str) -> None:
        self.codes[point_id] = code

    def index(self) -> dict[str, Record]:
        if not self.resuming or self.file is None:
            return {}
        return {pid: Record.from_json(r) for pid, r in self.file.index(self._code).items()}

    def done(self, point_id: str) -> Record | None:
        if not self.resuming or self.file is None:
            return None
        rec = self.file.index(self._code).get(point_id)
        return None if rec is None else Record.from_json(rec)

    @contextlib.contextmanager
    def claim(self, point_id: str) -> Iterator[Record | None]:
        if not self.resuming or self.file is None:
            yield None
            return
        with self.file.claim(point_id, self._code(point_id)) as other:
            yield None if other is None else Record.from_json(other)

    def save(self, rec: Record) -> None:
        if self.file is not None:
            self.file.append(rec.to_json())

    def keep_prompt(self, point_id: str, prompt: PromptResult, process: str) -> None:
        if self.resuming and self.file is not None:
            self.file.append(prompt_line(point_id, prompt_dict(prompt), process, self.codes.get(point_id)))

    def finished_prompts(self, point_id: str) -> dict[str, PromptResult]:
        if not self.resuming or self.file is None:
            return {}
        return {k: prompt_from_dict(v) for k, v in self.file.finished_prompts(point_id, self._code(point_id)).items()}

    def finished_processes(self, point_id: str) -> dict[str, str]:
        if not self.resuming or self.file is None:
            return {}
        return self.file.finished_processes(point_id, self._code(point_id))

    def stale(self, point_ids: list[str]) -> dict[str, str]:
        if not self.resuming or self.file is None or not self.file.path.exists():
            return {}
        wanted = {pid: code for pid in point_ids if (code := self.codes.get(pid)) is not None}
        found: dict[str, str] = {}     # point -> the git commit of its latest line of other code
        for ln in read_lines(self.file.path):
            pid = ln.get("point_id") or (ln.get("of_point") if ln.get("kind") == "prompt_result" else None)
            if pid not in wanted:
                continue
            code = record_code(ln) if "point_id" in ln else ln.get("code")
            if code == wanted[pid]:
                wanted.pop(pid)   # it has something of its own code to resume
                found.pop(pid, None)
            else:
                found[pid] = str((ln.get("versions") or {}).get("git") or found.get(pid) or "unknown")
        return found

    def save_manifest(self, sweep: str, points: list[tuple[str, str]]) -> None:
        if self.file is not None:
            self.file.append(sweep_manifest(sweep, points))
