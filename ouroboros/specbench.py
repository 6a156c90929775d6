"""Spec-Bench I/O (github.com/hemingkx/Spec-Bench).

In:  a question.jsonl ({question_id, category, turns}), checked on read (`ouroboros.prompts.sources.read_questions`).
     Decoding it is the `specbench` dataset (conf/dataset/specbench.yaml, ouroboros.prompts.datasets): prompt ids are
     the
     question ids.
Out: answer JSONL in the layout Spec-Bench's evaluation/eval.py writes and evaluation/speed.py reads: per line
     {question_id, category, answer_id, model_id, choices: [{index, turns, decoding_steps, new_tokens,
     wall_time, accept_lengths}], tstamp}; per turn: new_tokens, wall_time (s) and decoding_steps (target
     forwards); accept_lengths: tokens emitted per target forward (accepted + bonus, Spec-Bench's tau),
     concatenated over turns.

    python -m ouroboros.specbench <records> --out DIR [--model-id ID]   # one answer file per point

Built from records only (each prompt result is one turn; a record holds the dataset's one turn per question).
speed.py counts the baseline's tokens by re-tokenizing `turns` with the model's tokenizer: give it the real
pair's tokenizer (hf backend); on the simulator, `wall_time` is modelled seconds (`clock` says which).
Knows nothing of models.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ouroboros.argparser import ArgumentParser
from ouroboros.errors import OuroborosError, cli
from ouroboros.paths import check_not_inputs, slug
from ouroboros.running.record import Record, latest


def _qid(prompt_id: str) -> int | str:
    return int(prompt_id) if prompt_id.lstrip("-").isdigit() else prompt_id


def answers(rec: Record, model_id: str) -> list[dict]:
    """One Spec-Bench answer line per prompt of a record, sorted by question id."""
    lines = []
    for p in rec.prompts:
        if "accept_lengths" not in p:
            raise OuroborosError(f"record {rec.point_id} has no per-step accept lengths (written before schema 1?)")
        choice = {"index": 0, "turns": [p.get("text") or " ".join(map(str, p["output"]))],
                  "decoding_steps": [p["target_forwards"]], "new_tokens": [p["new_tokens"]],
                  "wall_time": [p["elapsed_s"]], "accept_lengths": list(p["accept_lengths"])}
        lines.append({"question_id": _qid(p["prompt_id"]), "category": p.get("category", ""),
                      "answer_id": f"{rec.record_id[:12]}-{p['prompt_id']}", "model_id": model_id,
                      "choices": [choice], "tstamp": rec.time, "clock": rec.clock})
    return sorted(lines, key=lambda a: (str(type(a["question_id"])), a["question_id"]))


def answer_path(out: str | Path, model_id: str, label: str) -> Path:
    """Where a point's answer file goes: <out>/<model_id>-<label>.jsonl."""
    return Path(out) / f"{slug(model_id)}-{slug(label)}.jsonl"


def check_answer_paths(records: list[Record], out: str | Path, model_id: str | None, inputs: list[Path]) -> None:
    """Raise OuroborosError (one line) when an answer file would overwrite an input records file, or an existing file
    that is not an answer file (its first line has no question_id and answer_id)."""
    paths = [answer_path(out, model_id or r.model_name, r.label) for r in latest(records)]
    check_not_inputs(paths, inputs, "--out")
    for p in paths:
        try:
            with open(p, "rb") as f:
                first = f.read(1 << 20).lstrip().partition(b"\n")[0]
        except OSError:
            continue
        try:
            line = json.loads(first) if first else {}
        except ValueError:
            line = None
        if not isinstance(line, dict) or (line and not {"question_id", "answer_id"} <= line.keys()):
            raise OuroborosError(f"--out: {str(p)!r} exists and is not a Spec-Bench answer file: writing answers "
                                 "would overwrite it; remove it or pick another folder")


def write_answers(records: list[Record], out: str | Path, model_id: str | None = None) -> list[Path]:
    """One answer file per point (latest record per point_id): <out>/<model_id>-<label>.jsonl."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rec in latest(records):
        mid = model_id or rec.model_name
        path = answer_path(out, mid, rec.label)
        path.write_text("".join(json.dumps(a) + "\n" for a in answers(rec, f"{mid}-{rec.label}")))
        paths.append(path)
    return paths


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ouroboros.specbench", description="Spec-Bench answer files "
                                 "from ouroboros records (run the sweep with dataset=specbench first).")
    ap.add_argument("records", help="a records .jsonl file or a folder of them")
    ap.add_argument("--out", default="runs/specbench", help="folder for the answer files")
    ap.add_argument("--model-id", default=None, help="model_id prefix (default: the model config's name)")
    args = ap.parse_args(argv)
    from ouroboros.paths import check_out_dir
    from ouroboros.running.sinks import load_records, record_files

    check_out_dir(args.out, "--out")
    records = load_records(args.records)
    if not records:
        raise OuroborosError(f"no records in {args.records!r}")
    check_answer_paths(records, args.out, args.model_id, record_files(args.records))
    paths = write_answers(records, args.out, args.model_id)
    for p in paths:
        print(p)
    print(f"{len(paths)} answer file(s); score them from a Spec-Bench checkout with evaluation.speed's "
          "get_single_speedup(<answers>, <vanilla answers>, <tokenizer dir>) (its command line reads fixed files; "
          "docs/specbench.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
