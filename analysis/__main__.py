"""`python -m analysis <records file or folder> [--out DIR] [--format png svg]`: tables (Markdown, CSV) and figures
(PNG, SVG) from JSONL records. Prints what it wrote (the tables are in the output folder)."""

from __future__ import annotations

import sys
from pathlib import Path

from analysis.report import table_rows, write_report
from ouroboros.argparser import ArgumentParser
from ouroboros.errors import OuroborosError, cli
from ouroboros.paths import check_not_inputs, check_out_dir, same_file
from ouroboros.running.sinks import load_sweep_records, record_files

TABLES = ("table.md", "table.csv", "tasks.md", "tasks.csv")


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m analysis", description=__doc__)
    ap.add_argument("records", help="a records .jsonl file or a folder of them")
    ap.add_argument("--out", default="runs/analysis", help="output folder (default: runs/analysis)")
    ap.add_argument("--format", nargs="+", default=["png", "svg"], choices=["png", "svg", "pdf"])
    args = ap.parse_args(argv)
    check_out_dir(args.out, "--out")
    inputs = record_files(args.records)
    out = Path(args.out)
    # the tables' names, and any input in the folder named like a figure (their names depend on the records)
    check_not_inputs([out / t for t in TABLES] + [f for f in inputs if f.suffix[1:] in args.format
                                                  and same_file(f.parent, out)], inputs, "--out")
    records = load_sweep_records(args.records)
    if not records:
        raise OuroborosError(f"no records in {args.records!r}")
    written = write_report(records, args.out, args.format)
    figs = f"{len(written)} figure(s) ({', '.join(sorted(written))})" if written else "no figure"
    print(f"{len(table_rows(records))} point(s): tables table.md/csv, tasks.md/csv and {figs} written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
