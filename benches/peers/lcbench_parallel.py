#!/usr/bin/env python
"""Optuna on LCBench with several trials at once: the 8-worker reference for tune's bench.

`benches/peers/run_lcbench.py` runs Optuna one trial at a time, so its table is a 1-worker
reference. This runs the same samplers and pruners (Optuna 5, the same seeds and study names)
with W trials in flight on the simulated clock of tune's `simulator::simulate_timed`: each
worker trains its trial's next epoch, which takes the seconds the surrogate's `time` output
says (at least a millisecond); the worker that finishes first reports next (ties: the lowest
worker); a free worker asks Optuna for a new trial at once. Every reported epoch costs one of
the budget, and the incumbent and its normalised regret are scored by `run_lcbench.py`'s own
functions, so the columns are the same equal-epoch budgets as tune's 8-worker table.

What parallel Optuna users get: the pruners compare against every trial's reports so far
(running ones included), and TPE leaves running trials out unless `constant_liar=True`
(the `tpe-liar` methods, Optuna's advice for distributed runs).

    python benches/peers/lcbench_parallel.py [--workers-sim 8] [--seeds 10] [--held-out]
        [--methods ...]

With --workers-sim 1 it reproduces run_lcbench.py's table exactly (same calls in the same order).

Needs optuna==5.0.0, numpy and onnxruntime (`benches/peers/requirements.txt`'s pins).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import Pool
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = HERE
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "lcbench"))

import numpy as np  # noqa: E402

import adapters  # noqa: E402
import lcbench  # noqa: E402
import run_lcbench  # noqa: E402

E = lcbench.MAX_EPOCH
ACC = lcbench.METRICS.index("val_accuracy")
TIME = lcbench.METRICS.index("time")
METHODS = run_lcbench.METHODS + ["optuna-tpe-liar+Hyperband"]


def study_for(method: str, task: str, seed: int):
    import optuna

    sampler_kind, _, pruner_kind = method.partition("+")
    if "random" in sampler_kind:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, constant_liar="liar" in sampler_kind)
    pruner = {"": optuna.pruners.NopPruner(),
              "SHA": optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
              "Hyperband": optuna.pruners.HyperbandPruner(min_resource=1, max_resource=E,
                                                          reduction_factor=3),
              "Median": optuna.pruners.MedianPruner()}[pruner_kind]
    return optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner,
                               study_name=f"{method}-{task}-seed{seed}")


def run_parallel(method: str, task: str, seed: int, budget: int, workers: int) -> Dict[str, Any]:
    adapters.quiet_libraries()
    from optuna.trial import TrialState

    study = study_for(method, task, seed)
    events: List[List[float]] = []  # (epochs used, config index, epoch, val_accuracy)
    n_configs = 0
    slots: List[Any] = [None] * workers
    now, used = 0.0, 0

    def start(run, now):
        t = run["epoch"]
        trained = float(run["curve"][t - 1, TIME])
        run["done_at"] = now + max(trained - run["trained"], 1e-3)
        run["trained"] = trained

    while used < budget:
        for w in range(workers):
            if slots[w] is None:
                trial = study.ask()
                cfg = adapters.optuna_suggest(trial, lcbench.SPACE)
                run = {"trial": trial, "idx": n_configs, "curve": lcbench.curves(task, [cfg])[0],
                       "epoch": 1, "trained": 0.0}
                n_configs += 1
                start(run, now)
                slots[w] = run
        w = min(range(workers), key=lambda i: slots[i]["done_at"])
        run = slots[w]
        now = run["done_at"]
        t = run["epoch"]
        v = float(run["curve"][t - 1, ACC])
        used += 1
        events.append([used, run["idx"], t, v])
        run["trial"].report(v, step=t)
        if t == E:
            study.tell(run["trial"], v)
            slots[w] = None
        elif run["trial"].should_prune():
            study.tell(run["trial"], state=TrialState.PRUNED)
            slots[w] = None
        else:
            run["epoch"] += 1
            start(run, now)
    return {"events": events, "n_configs": n_configs}


def _job(a):
    run, method, task, seed, budget, workers = a
    return method, task, seed, run(method, task, seed, budget, workers)


def main_for(run, methods: List[str], who: str, doc: str):
    """Runs `run(method, task, seed, budget, workers)` for each method, task and seed (as the
    command line asks) and prints the table: the command line of this script and of
    `lcbench_mf_parallel.py`."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="*", default=lcbench.DEV_TASKS)
    ap.add_argument("--held-out", action="store_true",
                    help="the tasks outside DEV_TASKS instead (for checking, never tuning)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget-configs", type=int, default=40, help="budget = this * 52 epochs")
    ap.add_argument("--methods", nargs="*", default=methods)
    ap.add_argument("--workers-sim", type=int, default=8, help="trials in flight at once")
    ap.add_argument("--processes", type=int, default=2, help="runs computed side by side")
    args = ap.parse_args()
    if args.held_out:
        args.tasks = [t for t in lcbench.TASKS if t not in lcbench.DEV_TASKS]
    budget = E * args.budget_configs
    cps = [E * c for c in (10, 20, 40, 80) if c <= args.budget_configs]
    t0 = time.perf_counter()
    refs = {t: run_lcbench.reference(t) for t in args.tasks}
    jobs = [(run, m, t, s, budget, args.workers_sim) for m in args.methods for t in args.tasks
            for s in range(args.seeds)]
    runs: Dict[str, Dict[str, Dict[int, Any]]] = {}
    with Pool(args.processes) as pool:
        for m, t, s, r in pool.imap_unordered(_job, jobs, chunksize=1):
            runs.setdefault(m, {}).setdefault(t, {})[s] = r
    print(f"LCBench, {who}, {args.workers_sim} trials at once "
          f"(simulated clock), tasks {', '.join(args.tasks)}, {args.seeds} seeds: mean over tasks "
          f"of the median normalised regret ({time.perf_counter() - t0:.0f} s)")
    print("| method | " + " | ".join(f"{c} ep" for c in cps) + " |")
    print("|---|" + "---|" * len(cps))
    for m in args.methods:
        per_task = []
        for t, per_seed in runs[m].items():
            ref = refs[t]
            accs = np.array([run_lcbench.incumbent_curve(per_seed[s]["events"], cps)
                             for s in sorted(per_seed)])
            reg = (ref["ref"] - accs) / (ref["ref"] - ref["random_median"])
            per_task.append([float(np.median(reg[:, i])) for i in range(len(cps))])
        mean = np.mean(np.array(per_task), axis=0)
        print(f"| {m} | " + " | ".join(run_lcbench.fmt(v) for v in mean) + " |")


def main():
    main_for(run_parallel, METHODS, f"Optuna {__import__('optuna').__version__}", __doc__)


if __name__ == "__main__":
    main()
