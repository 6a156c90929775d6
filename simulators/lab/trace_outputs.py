"""`python -m simulators trace`: a real run's outputs as a replay trace (simulators.replay's format, meta.source
"outputs"). Strategies whose drafts depend on the context only (pld, suffix, REST) replay it exactly, at any of
their settings and under any hardware clock; `simulators.pair.check_source` refuses the others."""

from __future__ import annotations

import json
from typing import Any

from ouroboros.errors import OuroborosError
from simulators.replay import mix


def outputs_trace(path: str, point: str = "vanilla", dataset: str | None = None, model: str = "qwen_coder",
                  tokenizer_dir: str | None = None, prompts=None, ids: list[str] | None = None) -> dict[str, Any]:
    """A trace doc (save with json) of the target's greedy outputs in a real run's records: point `point`'s (the
    label; several sweeps of it on other prompts join, a prompt's first output wins) on dataset kind `dataset`
    (None: the file must hold one). Each context along prompt + output answers the output's next token; nothing
    else is recorded. So a replay makes exactly the real decisions of a strategy whose drafts depend only on the
    context (`context_only`: pld, suffix, REST), at ANY of its settings and under any clock (where its real output
    is the point's: in bf16 a near-tie can make them differ, and the replay follows the point's); other strategies
    need predictions off that path and are refused (record them with `simulators check clock`). The prompts are
    rendered again from the record's dataset config with the pair's tokenizer (`prompts(dataset config, seed)`
    overrides: decisions.real_prompts's signature); `ids`: only these prompts. meta.source = "outputs" marks such a
    trace."""
    from ouroboros.running.sinks import RecordFile
    from simulators.lab.decisions.stats import real_points, real_prompts

    chosen = real_points(path, model, dataset, lambda r: r["label"] == point, repr(point))
    render = prompts or real_prompts(model, tokenizer_dir)
    table: dict[tuple[int, int], int] = {}
    out: list[dict[str, Any]] = []
    eos: set[int] = set()
    seen: set[str] = set()
    for rec in chosen:
        done = RecordFile(path).finished_prompts(rec["point_id"])
        for p in render(rec["config"]["dataset"], int(rec["config"].get("seed", 0))):
            if p.id not in done or p.id in seen or (ids is not None and p.id not in ids):
                continue
            seen.add(p.id)
            d = done[p.id]
            output = [int(t) for t in d["output"]]
            if d["stop_reason"] == "eos" and output:
                eos.add(output[-1])
            st = (0, 0)
            for t in p.ids:
                st = (st[0] + 1, mix(st[1], t))
            for t in output:
                table[st] = t
                st = (st[0] + 1, mix(st[1], t))
            out.append({"id": p.id, "ids": list(p.ids), "max_new_tokens": len(output)})
    if not out or (ids is not None and len(out) < len(set(ids))):
        missing = sorted(set(ids or ()) - seen)
        raise OuroborosError(f"--records {path!r}: point {point!r} has no finished output for "
                             + (f"prompt(s) {', '.join(missing)}" if missing else "any prompt its dataset renders"))
    cfg = chosen[0]["config"]
    meta = {"source": "outputs", "records": path, "point": point, "dataset": cfg["dataset"]["kind"],
            "model": model, "dtype": (cfg.get("backend") or {}).get("dtype")}
    vocab = max([*table.values(), *(t for p in out for t in p["ids"])]) + 1
    return {"meta": meta, "eos_ids": sorted(eos), "prompts": out,
            "models": {"target": {"vocab_size": vocab,
                                  "max_context": max(len(p["ids"]) + p["max_new_tokens"] for p in out) + 1,
                                  "conflicts": 0, "entries": [[k[0], k[1], v] for k, v in table.items()]}}}


def add_args(ap) -> None:
    ap.add_argument("--records", required=True, help="a real run's or sweep's records file (out=PATH)")
    ap.add_argument("--out", required=True, help="the trace file to write (JSON)")
    ap.add_argument("--point", default="vanilla", help="the point whose outputs to take (its label; default vanilla)")
    ap.add_argument("--dataset", default=None, help="the dataset kind, when the file holds several")
    ap.add_argument("--ids", default=None, help="comma-separated prompt ids to keep (default: every one)")
    ap.add_argument("--model", default="qwen_coder", help="the real pair (conf/model/<name>.yaml)")
    ap.add_argument("--tokenizer", default=None, help="the pair's tokenizer dir (default: the fetched one)")


def main(a) -> int:
    from ouroboros.paths import check_writable

    check_writable(a.out, "--out")
    ids = [i.strip() for i in a.ids.split(",") if i.strip()] if a.ids else None
    doc = outputs_trace(a.records, a.point, a.dataset, a.model, a.tokenizer, ids=ids)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    n, toks = len(doc["prompts"]), sum(p["max_new_tokens"] for p in doc["prompts"])
    print(f"wrote {a.out}: {n} prompts, {toks} output tokens of point {a.point} on {doc['meta']['dataset']}")
    print("replay strategies that draft from the context only (pld, suffix, rest) at any settings, e.g.:\n"
          f"  python -m ouroboros.sweep model={a.model} backend=sim sim.tokens=replay sim.trace={a.out} "
          f"hardware=<profile> dataset=synthetic dataset.num_prompts={n} 'sweep.grid=[\"strategy=pld,suffix\"]'")
    return 0
