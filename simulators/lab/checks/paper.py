"""The simulator's checks against published figures and closed forms, as tables (`python -m simulators check ...`).

paper: Yi-34B / Yi-6B on 2x A800 (the Ouroboros paper's setting), calibrated on the published vanilla and
  speculative (SpS) figures only (simulators/lab/calibration/paper_fit.py); lookahead and Ouroboros token/s and block
  efficiency are then predicted and printed against the published figures, with relative errors and whether the
  methods' speed ordering is right. Lookahead runs with the task's W = G and N (flagged: the paper does not list its
  lookahead settings). --text decisions takes the surrogate target's text knobs from the real Qwen2.5-Coder pair's
  decision profiles; --profiles predicts from the stored Yi profiles instead of fitting.
sensitivity: the paper's GSM8K 3x3x3 grid (gamma x W x beta) on the `paper` calibration: predicted best, worst and
  std of Ouroboros token/s vs the published ones (held out, like every Ouroboros figure).
closed-form: speculative on the i.i.d. surrogate vs E(gamma, alpha) = (1 - alpha^(gamma+1)) / (1 - alpha).
copy-rate: how often real continuations repeat what followed their last two tokens earlier, vs the surrogate
  target, and the surrogate `p_copy` that matches (simulators/lab/copyrate.py).

Knows nothing of real models; writes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ouroboros.errors import OuroborosError
from simulators.hardware import ROOFLINE_P_MAX
from simulators.lab.calibration.paper_fit import (
    DRAFT_OVERHEADS,
    METHODS,
    TASKS,
    Run,
    calibrate,
    method_runs,
    profile_calibration,
    profile_tasks,
    run,
    text_knobs,
)


def err(pred: float, pub: float | None) -> str:
    return "" if pub is None else f"{pred / pub - 1:+.1%}"


def paper(n_prompts: int = 16, seed: int = 0, sps: str = "hf", out=print,
          p_copy: dict[str, float] | None = None, profiles: bool = False, text: str = "none",
          draft_overhead: str = "scaled", roofline_p: float = 0.0) -> list[dict[str, Any]]:
    """p_copy: the surrogate target's copying per corpus ("code", "prose"; default None: the sim's own). profiles:
    predict from the stored calibration profiles (conf/sim/yi34b_6b_<task>.yaml) instead of fitting afresh. text: where
    the surrogate target's text knobs come from (`text_knobs`: none, or decisions = the real Qwen pair's fits).
    draft_overhead: as `calibrate`. roofline_p: the A800 roofline's shape (0: sharp; the overheads are refitted
    under it, as every calibrated figure is)."""
    tasks = tuple(replace(t, p_copy=(p_copy or {}).get(t.corpus), text=text_knobs(t, text), roofline_p=roofline_p)
                  for t in TASKS)
    if profiles:
        tasks = profile_tasks(tasks)
    cal = (profile_calibration(n_prompts, seed, tasks) if profiles
           else calibrate(n_prompts, seed, sps, tasks, draft_overhead))
    rows: list[dict[str, Any]] = []
    runs: dict[str, dict[str, Run]] = {}
    for t in tasks:
        g = cal.setting[t.name]
        runs[t.name] = {"vanilla": cal.vanilla[t.name], **method_runs(t, cal.a[t.name], g, n_prompts, seed)}
        plan = cal.plans[t.name][g][1]
        if (plan.new_tokens, plan.steps) != (runs[t.name]["speculative"].new_tokens,
                                             runs[t.name]["speculative"].steps):
            raise OuroborosError(f"{t.name}: the SpS replay disagrees with the loop (a bug in sps_plan)")
    out(f"calibration ({n_prompts} surrogate prompts per task, seed {seed}, "
        + (f"A800 roofline p {roofline_p:g} (a sensitivity check, unmeasured), " if roofline_p else "")
        + "SpS draft length: "
        f"{'HF assisted-generation schedule' if sps == 'hf' else 'best fixed gamma per task'}): {cal.overheads()}; "
        "per task target overhead ms / draft overhead ms / SpS gamma / agreement knob: "
        + ", ".join(f"{k} {cal.over_t[k] * 1e3:.1f}/{cal.over_d[k] * 1e3:.1f}/{cal.setting[k]}/{cal.a[k]:.4f}"
                    for k in cal.setting))
    hdr = (f"{'task':<10}{'method':<13}{'tok/s pred':>11}{'pub':>8}{'err':>8}{'x van pred':>11}{'pub':>7}{'err':>8}"
           f"{'eta pred':>9}{'pub':>7}{'err':>8}")
    out(hdr)
    out("-" * len(hdr))
    n_ok = n_all = 0
    worst = 0.0
    for t in tasks:
        r = runs[t.name]
        tps = {m: r[m].tps(cal.over_t[t.name], cal.over_d[t.name]) for m in METHODS}
        for m in METHODS:
            role = "fit" if m in ("vanilla", "speculative") else "predicted"
            pt, pe = t.pub_tps(m), t.pub_eta(m)
            x, px = tps[m] / tps["vanilla"], (pt / t.vanilla_tps if pt else None)
            rows.append({"task": t.name, "method": m, "role": role, "tps": tps[m], "tps_pub": pt, "x": x,
                         "x_pub": px, "eta": r[m].eta, "eta_pub": pe})
            if role == "predicted":
                for pred, pub in ((tps[m], pt), (r[m].eta, pe)):
                    if pub:
                        n_all += 1
                        e = abs(pred / pub - 1)
                        n_ok += e <= 0.15
                        worst = max(worst, e)
            out(f"{t.name:<10}{m + ('*' if role == 'fit' else ''):<13}{tps[m]:>11.2f}"
                f"{(f'{pt:.2f}' if pt else '-'):>8}{err(tps[m], pt):>8}{x:>11.2f}{(f'{px:.2f}' if px else '-'):>7}"
                f"{err(x, px) if m != 'vanilla' else '':>8}{r[m].eta:>9.2f}{(f'{pe:.2f}' if pe else '-'):>7}"
                f"{err(r[m].eta, pe) if m != 'vanilla' else '':>8}")
        ok = ordering_ok(tps, {m: t.pub_tps(m) for m in METHODS})
        rows.append({"task": t.name, "method": "ordering", "ok": ok})
        out(f"{t.name:<10}ordering of published methods by speed: {'right' if ok else 'WRONG'}")
    out(f"predicted cells within 15%: {n_ok}/{n_all}, worst {worst:.1%}; orderings right: "
        f"{sum(r['ok'] for r in rows if r['method'] == 'ordering')}/{len(TASKS)}")
    out("* = calibrated on this figure (vanilla token/s; SpS block efficiency and token/s); all other rows are "
        "predictions. Lookahead uses the task's W = G and N (the paper does not list its settings).")
    return rows


# PAPER_NUMBERS.md, "Sensitivity (GSM8K, Ouroboros)": the 3x3x3 grid's best and worst token/s and their std.
SENSITIVITY_BEST, SENSITIVITY_WORST, SENSITIVITY_STD = (29.32, (5, 14, 6)), (27.21, (3, 16, 7)), 0.57
SENSITIVITY_GRID = ((3, 4, 5), (14, 15, 16), (5, 6, 7))  # gamma x W (= G) x beta (the level N), K = 3


def sensitivity(n_prompts: int = 16, seed: int = 0, sps: str = "hf", out=print,
                draft_overhead: str = "scaled", roofline_p: float = 0.0) -> dict[str, Any]:
    """The paper's GSM8K grid on the `paper` calibration (nothing fitted to the grid): predicted best, worst and
    std of Ouroboros token/s against the published ones."""
    import itertools
    import statistics

    tasks = tuple(replace(t, roofline_p=roofline_p) for t in TASKS)
    cal = calibrate(n_prompts, seed, sps, tasks, draft_overhead=draft_overhead)
    task = next(t for t in tasks if t.name == "GSM8K")
    a = cal.a[task.name]
    tps: dict[tuple[int, int, int], float] = {}
    for g, w, b in itertools.product(*SENSITIVITY_GRID):
        r = run(task, "ouroboros", {"gamma": g, "W": w, "G": w, "N": b, "K": 3}, a, n_prompts, seed)
        tps[(g, w, b)] = r.tps(cal.over_t[task.name], cal.over_d[task.name])
    best, worst = max(tps, key=tps.__getitem__), min(tps, key=tps.__getitem__)
    std = statistics.pstdev(tps.values())
    (pb, pbp), (pw, pwp), ps = SENSITIVITY_BEST, SENSITIVITY_WORST, SENSITIVITY_STD
    out(f"GSM8K Ouroboros, 27 points (gamma, W = G, beta = N) x {n_prompts} surrogate prompts, on the paper "
        "calibration:")
    out(f"{'':<7}{'tok/s pred':>11}{'at':>14}{'pub':>8}{'at':>14}{'err':>8}")
    out(f"{'best':<7}{tps[best]:>11.2f}{str(best):>14}{pb:>8.2f}{str(pbp):>14}{err(tps[best], pb):>8}")
    out(f"{'worst':<7}{tps[worst]:>11.2f}{str(worst):>14}{pw:>8.2f}{str(pwp):>14}{err(tps[worst], pw):>8}")
    out(f"{'std':<7}{std:>11.2f}{'':>14}{ps:>8.2f}{'':>14}{err(std, ps):>8}")
    return {"tps": tps, "best": best, "worst": worst, "std": std}


def ordering_ok(pred: dict[str, float], pub: dict[str, float | None]) -> bool:
    ms = [m for m, v in pub.items() if v is not None]
    return sorted(ms, key=lambda m: pub[m] or 0) == sorted(ms, key=lambda m: pred[m])


def closed_form(new_tokens: int, out=print) -> None:
    from simulators.lab.closed_form import simulated_block_efficiency

    out(f"{'alpha':>6}{'gamma':>6}{'simulated':>11}{'E(g,a)':>9}{'error':>9}{'stderr':>9}{'forwards':>10}")
    for alpha, gamma in ((0.5, 2), (0.6, 3), (0.7, 4), (0.8, 5), (0.9, 8), (0.95, 12)):
        r = simulated_block_efficiency(alpha, gamma, new_tokens)
        out(f"{alpha:>6}{gamma:>6}{r.simulated:>11.4f}{r.expected:>9.4f}{r.rel_error:>+9.2%}"
            f"{r.stderr / r.expected:>9.2%}{r.forwards:>10}")

def positive(flag: str, value: int, least: int = 1) -> None:
    if value < least:
        raise OuroborosError(f"{flag} must be >= {least}, got {value}")


def fit_args(ap) -> None:
    """The flags `paper` and `sensitivity` share: prompts, seed and how the paper calibration is fitted."""
    ap.add_argument("--prompts", type=int, default=16, help="surrogate prompts per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sps", choices=["hf", "tuned"], default="hf",
                    help="SpS draft length prior: HF assisted-generation schedule, or best fixed gamma per task")
    ap.add_argument("--draft-overhead", choices=DRAFT_OVERHEADS, default="scaled",
                    help="the draft's fitted per-forward overhead: r x each task's target overhead (one ratio r), or "
                         "one overhead for all tasks")
    ap.add_argument("--roofline-p", type=float, default=0.0,
                    help="the A800 roofline's shape, 0 (sharp, the default) or p > 0 for (w^p + f^p)^(1/p) "
                         "(simulators/cost_model.py); unmeasured on the A800, so a sensitivity check, not a fit")


def check_fit_args(a) -> None:
    if not 0 <= a.roofline_p <= ROOFLINE_P_MAX:
        raise OuroborosError(f"--roofline-p must be in [0, {ROOFLINE_P_MAX:g}] (0 = the sharp roofline), got "
                             f"{a.roofline_p}")
    positive("--prompts", a.prompts)


def paper_args(ap) -> None:
    fit_args(ap)
    ap.add_argument("--p-copy", default="sim", metavar="CODE,PROSE",
                    help="the surrogate target's p_copy for the code and the prose tasks, 'sim' (the simulator's "
                         "default, conf/sim/default.yaml) or 'fit' (fitted to HumanEval canonical solutions and "
                         "MT-Bench reference answers, as copy-rate prints)")
    ap.add_argument("--text", choices=["none", "decisions"], default="none",
                    help="the surrogate target's text knobs: the defaults, or the decision profiles fitted to the real "
                         "Qwen2.5-Coder pair on a task of the same kind (no published figure)")
    ap.add_argument("--profiles", action="store_true",
                    help="predict from the stored profiles (conf/model/yi34b_6b.yaml's sim_profiles, written by "
                         "`python -m simulators calibrate paper`) instead of fitting afresh")


def paper_main(a) -> int:
    if a.profiles and (a.sps != "hf" or a.text != "none" or a.draft_overhead != "scaled" or a.roofline_p):
        raise OuroborosError("--profiles goes with `paper` and the HF SpS prior, without --text, --draft-overhead or "
                             "--roofline-p (the profiles were fitted with the prior and hold their own text knobs and "
                             "overheads)")
    check_fit_args(a)
    paper(a.prompts, a.seed, a.sps, p_copy=parse_p_copy(a.p_copy), profiles=a.profiles, text=a.text,
          draft_overhead=a.draft_overhead, roofline_p=a.roofline_p)
    return 0


def sensitivity_main(a) -> int:
    check_fit_args(a)
    sensitivity(a.prompts, a.seed, a.sps, draft_overhead=a.draft_overhead, roofline_p=a.roofline_p)
    return 0


def copy_rate_args(ap) -> None:
    ap.add_argument("--source", action="append", metavar="SRC[=CORPUS]",
                    help="humaneval, mtbench or a JSONL file of {prompt, completion} lines (=code or =prose: the "
                         "surrogate corpus to compare with); default humaneval=code and mtbench=prose")
    ap.add_argument("--window", type=int, default=256, help="how far back copying looks (tokens)")
    ap.add_argument("--records", default=None, help="instead: a real greedy sweep's records file: the pair's own "
                    "outputs, by match length into the prompt, against the surrogate's (see --sim)")
    ap.add_argument("--dataset", default=None, help="with --records: the dataset kind whose points to read")
    ap.add_argument("--model", default="qwen_coder", help="with --records: the pair (conf/model)")
    ap.add_argument("--sim", default=None, help="with --records: the profile whose surrogate to compare (default: "
                    "the model's profile for the dataset's task; with --by-category each category group's)")
    ap.add_argument("--by-category", action="store_true", help="with --records: one table per profile of the "
                    "model's sim_category_profiles for the dataset")
    ap.add_argument("--tokenizer", default=None, help="the pair's tokenizer directory (default: the fetched one)")


def copy_rate_main(a) -> int:
    from simulators.lab.copyrate import report

    positive("--window", a.window, 3)
    if a.records is not None:
        return copy_rate_records(a)
    if a.sim or a.by_category or a.dataset:
        raise OuroborosError("--sim, --by-category and --dataset go with --records")
    sources = {}
    for spec in a.source or ["humaneval=code", "mtbench=prose"]:
        src, _, corpus = spec.partition("=")
        sources[src] = corpus or ("code" if src == "humaneval" else "prose")
        if sources[src] not in ("code", "prose"):
            raise OuroborosError(f"--source {spec}: the corpus must be code or prose")
    report(sources, a.window)
    return 0


def copy_rate_records(a) -> int:
    """`check copy-rate --records`: one table per group of prompts (simulators/lab/copyrate.py records_report)."""
    from simulators.architectures import load_conf
    from simulators.lab.copyrate import records_report
    from simulators.sim_profiles import check_profile_name, load_profile

    if a.source:
        raise OuroborosError("--records replaces --source: pass one of them")
    model = load_conf("model", a.model)
    task = a.dataset or "humaneval"
    groups: dict[str, tuple[dict, set[str] | None]] = {}
    if a.by_category:
        per = (model.get("sim_category_profiles") or {}).get(task)
        if not per:
            raise OuroborosError(f"--by-category: model {a.model!r} names no sim_category_profiles for {task!r}")
        for cat, prof in per.items():
            groups.setdefault(prof, (load_profile(prof), set()))[1].add(cat)  # type: ignore[union-attr]
    else:
        prof = a.sim or (model.get("sim_profiles") or {}).get(task)
        if prof:
            check_profile_name(prof)
        groups[prof or "prior"] = (load_profile(prof) if prof else {}, None)
    records_report(a.records, a.dataset, {g: (o, c) for g, (o, c) in groups.items()}, a.model, a.window,
                   tokenizer_dir=a.tokenizer)
    return 0


def closed_form_args(ap) -> None:
    ap.add_argument("--tokens", type=int, default=200_000, help="tokens per point")


def closed_form_main(a) -> int:
    positive("--tokens", a.tokens)
    closed_form(a.tokens)
    return 0


def parse_p_copy(spec: str) -> dict[str, float] | None:
    if spec == "sim":
        return None
    if spec == "fit":
        from simulators.lab.copyrate import fit_sources

        return fit_sources()
    try:
        code, prose = (float(x) for x in spec.split(","))
    except ValueError:
        raise OuroborosError(f"--p-copy must be CODE,PROSE (two numbers in [0, 1]) or 'fit', got {spec!r}") from None
    if not (0 <= code <= 1 and 0 <= prose <= 1):
        raise OuroborosError(f"--p-copy values must be in [0, 1], got {spec!r}")
    return {"code": code, "prose": prose}
