"""`python -m ouroboros.answers <overrides>`: decode the model's own turn-1 answers a workload needs
(dataset=mtbench_multiturn, selfrefine, or a mix holding them) and cache them, so later runs find them.

Give it the overrides of the run that asked for them (model=, backend.dtype=, backend.device=, dataset= and the
dataset's options): it composes the same config, selects the same requests, and decodes each missing answer once
with the target alone (vanilla, greedy, through the one decode loop), rendered as a one-turn prompt (the
tokenizer's chat template, no system message), at most `dataset.answer_tokens` new tokens. Answers go to
`<answers folder>/<source>.jsonl` ({question_id, answer, new_tokens, stop_reason}); the folder is the cache folder
of the target model, dtype and answer budget (`ouroboros.prompts.workloads.answers_key`) unless dataset.answers_dir
names
one, and its meta.json says whose answers it holds. The file is rewritten whole after every answer, so a build
stopped part way keeps what it decoded, and a rerun decodes only what is missing.

    python -m ouroboros.answers model=qwen_coder backend.dtype=bfloat16 dataset=selfrefine

Knows nothing of records, sweeps or speedups; measures nothing.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError, cli
from ouroboros.paths import check_out_dir
from ouroboros.prompts.datasets import render, select_records
from ouroboros.prompts.sources import Awaited, Record
from ouroboros.prompts.workloads import NOT_IN_KEY, answers_file, answers_key, read_meta


def compose_run(overrides: Sequence[str]) -> Any:
    """The RunConfig `python -m ouroboros.run <overrides>` would run (composed, typed; not validated: its dataset
    check is what refuses missing answers)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ouroboros.config import CONF_DIR, one_line, to_run_config

    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as e:
        raise OuroborosError(one_line(e)) from None
    return to_run_config(cfg)


def awaited_of(dataset: dict[str, Any], seed: int) -> tuple[list[Awaited], int]:
    """(the distinct answers the selected requests await, the number of requests)."""
    records, _ = select_records(dataset, seed)
    seen: dict[tuple[str, str, str], Awaited] = {}
    for r in records:
        if r.awaits is not None:
            seen.setdefault((r.awaits.folder, r.awaits.source, r.awaits.qid), r.awaits)
    return list(seen.values()), len(records)


def answers_meta(model: dict[str, Any], dtype: str, device: str, tokens: int) -> dict[str, Any]:
    return {"key": answers_key(model, dtype, tokens), "model": {k: v for k, v in model.items() if k not in NOT_IN_KEY},
            "dtype": dtype, "device": device, "answer_tokens": tokens, "decoding": "vanilla, greedy",
            "prompt": "the first turn alone; the tokenizer's chat template, no system message"}


def claim_folder(folder: Path, meta: dict[str, Any]) -> None:
    """Write meta.json into a new folder; refuse a folder that holds another model's (or budget's) answers."""
    old = read_meta(folder)
    if old is not None and old.get("key") != meta["key"]:
        raise OuroborosError(f"{folder} holds the answers of another model, dtype or budget ({old.get('key')}, "
                             f"this run needs {meta['key']}): set dataset.answers_dir to another folder")
    if old is None:
        folder.mkdir(parents=True, exist_ok=True)
        write_whole(folder / "meta.json", json.dumps(meta, indent=1, sort_keys=True) + "\n")


def write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def build(awaited: Sequence[Awaited], target: Any, tokenizer: Any, eos_ids: Sequence[int],
          log: Callable[[str], None] = print) -> int:
    """Decode every awaited answer (vanilla, greedy) on `target` (a Backend) and add it to its folder's
    `<source>.jsonl`. Returns the number decoded."""
    from ouroboros.running.harness import StrategyRun, StrategyRunner

    runner = StrategyRunner(StrategyRun("vanilla"), target, None, eos_ids)
    lines: dict[Path, list[str]] = {}
    for i, a in enumerate(awaited, 1):
        path = answers_file(a.folder, a.source)
        if path not in lines:
            lines[path] = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        text = render(Record(a.qid, [a.text], []), tokenizer, "auto", None, "{prompt}")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) >= target.max_context:
            raise OuroborosError(f"{a.source} {a.qid}: its prompt of {len(ids)} tokens leaves no room in the model "
                                 f"context of {target.max_context}")
        res = runner(ids, a.tokens, a.qid)
        answer = tokenizer.decode(res.output, skip_special_tokens=True)
        lines[path].append(json.dumps({"question_id": a.qid, "answer": answer, "new_tokens": len(res.output),
                                       "stop_reason": res.stop_reason}))
        write_whole(path, "\n".join(lines[path]) + "\n")
        log(f"answer {i}/{len(awaited)}: {a.source} {a.qid}, {len(res.output)} tokens ({res.stop_reason}), "
            f"{res.elapsed_s:.1f} s")
    return len(awaited)


def check_model(run: Any) -> dict[str, Any]:
    """The model spec to load (the target alone), or a one-line refusal; loads nothing."""
    from ouroboros.backends.models import check_device, loading_options, parse_dtype

    if run.kind.simulated:
        raise OuroborosError("the answers are a real model's own: run the build with a real pair (backend=hf), then "
                             "point a simulated run at their folder with dataset.answers_dir=<folder>")
    kind, _ = loading_options(run.model)
    if kind == "tiny":
        raise OuroborosError("model=tiny has no tokenizer, so it cannot answer text prompts (use a real model, or "
                             "model=hf model.target=<dir> with a tokenizer)")
    parse_dtype(run.backend.dtype)
    check_device(run.backend.device)
    return {**run.model, "draft": None} if "draft" in run.model else dict(run.model)


@cli
def main(argv: list[str] | None = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    if any(o in ("-h", "--help") for o in overrides):
        print(__doc__)
        return 0
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise OuroborosError(f"expected Hydra overrides (key=value), got {bad[0]!r} (see --help)")
    run = compose_run(overrides)
    if "kind" not in run.dataset:
        raise OuroborosError("dataset config has no 'kind' (pick one with dataset=<name>)")
    awaited, n = awaited_of(run.dataset, run.seed)
    folders = sorted({a.folder for a in awaited})
    if not awaited:
        if not any(k in run.dataset for k in ("answers_model", "answers_dir", "parts")):
            raise OuroborosError(f"dataset {run.dataset['kind']!r} needs no turn-1 answers (the workloads that do: "
                                 "mtbench_multiturn, selfrefine, a mix holding them)")
        print(f"all {n} requests have their turn-1 answers; nothing to decode")
        return 0
    model = check_model(run)
    tokens = {a.folder: a.tokens for a in awaited}
    for folder in folders:   # every folder writable before any is claimed (nothing made if one is not)
        check_out_dir(folder, "dataset.answers_dir")
    for folder in folders:
        claim_folder(Path(folder), answers_meta(model, run.backend.dtype, run.backend.device, tokens[folder]))
    print(f"{len(awaited)} turn-1 answers to decode for {n} requests, into {', '.join(folders)}", flush=True)
    import torch

    from ouroboros.backends.hf import HFBackend
    from ouroboros.backends.models import load_pair

    if run.backend.threads:
        torch.set_num_threads(run.backend.threads)
    pair = load_pair(model, dtype=run.backend.dtype, device=run.backend.device)
    if pair.tokenizer is None:
        raise OuroborosError("this model has no tokenizer: it cannot answer text prompts")
    build(awaited, HFBackend(pair.target, name="target"), pair.tokenizer, pair.eos_ids,
          log=lambda m: print(m, flush=True))
    left, _ = awaited_of(run.dataset, run.seed)
    print(f"done: {len(awaited)} answers decoded; {len(left)} still missing")
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())
