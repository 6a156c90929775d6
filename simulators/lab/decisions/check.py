"""`python -m simulators check decisions`: real vs simulated decision statistics on held-out prompts.

The recorded runs' odd prompts (the fit used the even ones; lab/decisions/stats.py), under a sim profile or the
defaults: the table of eta, c, #Match and hit rates side by side, how many cells are within target, and the
prompt-sampling reference (the fit prompts' own real statistics as the prediction). Writes nothing.
"""

from __future__ import annotations

from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.paths import default_cache_dir
from simulators.lab.decisions.stats import (
    RealRun,
    compare,
    floor_lines,
    id_mapper,
    load_real,
    load_sweep,
    score,
    split,
    stats,
    table,
    unrecorded_notes,
)
from simulators.trust import DATASET_TASKS, dataset_task


def add_args(ap) -> None:
    ap.add_argument("--model", default="qwen_coder", help="the real pair (conf/model/<name>.yaml)")
    ap.add_argument("--dataset", default="humaneval", help="the task the runs were recorded on")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the recorded budget")
    ap.add_argument("--dir", default=None, help="recorded runs (default <cache>/decisions/<model>-<dataset>-<max new "
                                                "tokens>)")
    ap.add_argument("--records", default=None, help="or a real sweep's records file (its points on --dataset; no "
                                                    "trace needed)")
    ap.add_argument("--sim", default=None, help="the sim profile to check (conf/sim/<name>.yaml; default: the model "
                                                "YAML's profile for --dataset's task, as a run picks it; 'default': "
                                                "the uncalibrated prior)")
    ap.add_argument("--by-category", action="store_true",
                    help="decide each prompt by its category's profile, as a run on the task's profile does (the "
                         "model YAML's sim_category_profiles for --dataset; --sim: the profile of the others)")
    ap.add_argument("--tokenizer", default=None, help="the pair's tokenizer dir (default: the fetched one)")
    ap.add_argument("--prompts", choices=("held-out", "all"), default="held-out",
                    help="held-out: the odd positions (a profile fitted to these records saw the even ones); all: "
                         "every prompt, for records of prompts the profile never saw")


def main(a) -> int:
    check_args(a)
    if a.records:
        real = load_sweep(a.records, a.model, a.dataset, a.tokenizer)
    else:
        real = load_real(a.dir or str(default_cache_dir() / "decisions" / f"{a.model}-{a.dataset}-{a.max_new_tokens}"),
                         a.model)
    formats = [r.prompt_format for r in real.values()]
    a.sim = pick_profile(a.model, a.dataset, a.sim, formats[0] if formats else None)
    routes = None
    if getattr(a, "by_category", False):
        from simulators.architectures import load_conf
        from simulators.trust import category_profiles

        routes = category_profiles(load_conf("model", a.model), {"kind": a.dataset})
        if not routes:
            raise OuroborosError(f"--by-category: conf/model/{a.model}.yaml names no sim_category_profiles for "
                                 f"{a.dataset}")
    validate(real, a.sim, a.model, a.tokenizer, every=getattr(a, "prompts", "held-out") == "all", by_category=routes,
             task=dataset_task({"kind": a.dataset}))
    return 0


def check_args(a) -> None:
    """The cheap arguments, in order, before any record is read: the model profile, the dataset kind, the sim
    profile, the budget, then the files to read."""
    import os

    from ouroboros.prompts.datasets import RECORD_LOADERS
    from simulators.architectures import check_name, load_conf
    from simulators.sim_profiles import check_profile_name

    load_conf("model", check_name(a.model, "--model"))
    kinds = sorted({"synthetic", *RECORD_LOADERS, *DATASET_TASKS})   # kinds, and the tasks recorded by name
    if a.dataset not in kinds:
        raise OuroborosError(f"--dataset: unknown dataset {a.dataset!r}; known: {', '.join(kinds)}")
    if a.sim:
        check_profile_name(check_name(a.sim, "--sim"))
    if a.max_new_tokens < 1:
        raise OuroborosError(f"--max-new-tokens must be >= 1, got {a.max_new_tokens}")
    if a.dir and a.records:
        raise OuroborosError("check decisions takes --dir (recorded runs) or --records (a sweep's records), not both")
    if a.records and not os.path.isfile(a.records):
        raise OuroborosError(f"--records {a.records!r}: no such file")
    if a.dir and not os.path.isdir(a.dir):
        raise OuroborosError(f"--dir {a.dir!r}: no such folder")


def pick_profile(model: str, dataset: str, sim: str | None, prompt_format: dict[str, Any] | None = None,
                 out=print) -> str | None:
    """--sim as typed, else the profile a simulated run of `model` on `dataset` with the real runs' prompt rendering
    (`prompt_format`: chat, template) picks (`trust.default_profile`), named in one line; None where the pair names
    none for that task (the prior decides)."""
    if sim:
        return sim
    from simulators.architectures import load_conf
    from simulators.trust import default_profile

    picked = default_profile(load_conf("model", model), {"kind": dataset, **(prompt_format or {})})
    if picked:
        out(f"note: --sim {picked}: conf/model/{model}.yaml's profile for {dataset} (--sim default: the prior)")
    return picked


def validate(real: dict[str, RealRun], sim: str | None, model: str = "qwen_coder", tokenizer: str | None = None,
             out=print, every: bool = False, by_category: dict[str, str] | None = None,
             task: str | None = None) -> dict[str, Any]:
    """Real vs simulated statistics on the held-out prompts (`every`: on all of them, none was fitted);
    `by_category`: category -> the profile deciding its prompts (sim.by_category); `task`: whose prompt floor each
    eta error is set against (`floor_lines`)."""
    from simulators.sim_profiles import load_profile

    opts = load_profile(sim) if sim else {}
    opts.pop("fit", None)
    if by_category:
        opts["by_category"] = by_category
    mapper = id_mapper(model, tokenizer)
    rows = compare(real, opts, mapper, "all" if every else "eval")
    for line in unrecorded_notes(real):
        out(line)
    per = f" + per category {', '.join(sorted(set(by_category.values())))}" if by_category else ""
    out(f"{'every prompt' if every else 'held-out prompts (odd positions)'}, sim={sim or 'default'}{per}:")
    out(table(rows))
    sc = score(rows)
    out(f"within target (eta, c 10%; #Match, hit rates 15%): {sc['ok']}/{sc['all']}; misses: "
        + (", ".join(sc["misses"]) or "none"))
    for line in floor_lines(rows, task):
        out(line)
    if every:   # no fit half to take as the reference
        return {"rows": rows, "score": sc}
    ref = score(sampling_rows(real))
    out(f"prompt-sampling reference: the fit prompts' own REAL statistics taken as the prediction of the held-out "
        f"ones: {ref['ok']}/{ref['all']} within target (what any predictor fitted to those prompts alone can expect "
        "when the prompt sets differ); misses: " + (", ".join(ref["misses"]) or "none"))
    return {"rows": rows, "score": sc, "sampling": ref}


def sampling_rows(real: dict[str, RealRun]) -> list[dict[str, Any]]:
    """compare()'s rows with the fit prompts' real statistics in the simulator's place: how far apart the two
    prompt sets' real statistics are (a prompt-agnostic predictor fitted on one set predicts, at best, that set)."""
    rows = []
    for label, run in real.items():
        fit_pos, eval_pos = split(len(run.results))
        rows.append({"run": label, "prompts": len(eval_pos), "real": stats([run.results[i] for i in eval_pos]),
                     "sim": stats([run.results[i] for i in fit_pos])})
    return rows
