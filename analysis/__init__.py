"""analysis: tables and figures from ouroboros JSONL records (`python -m analysis <records> --out <dir>`).
Reads records only; never re-measures."""
