#!/usr/bin/env python
"""SMAC3 and DEHB on LCBench with several trials at once: the 8-worker multi-fidelity anchors.

`run_lcbench_mf.py` runs SMAC3 2.4.1 (SMAC-HB = `MultiFidelityFacade`, `HyperbandFacade`) and
DEHB 0.1.2 one trial at a time. This runs them with W trials in flight on the simulated clock
that `lcbench_parallel.py` uses for Optuna and tune's `simulator::simulate_timed` uses for
tune: each worker trains its job's next epoch, which takes the seconds the surrogate's `time`
output says (at least a millisecond); the worker that finishes an epoch first goes next (ties:
the lowest worker); a worker whose job is done tells the optimiser and asks it for the next
job at once. Both libraries' ask/tell interfaces hand out jobs while others are pending
(SMAC's Hyperband intensifier and DEHB both start another bracket while a rung waits for
results), so no worker waits. Neither is given a worker count: SMAC's `n_workers` and DEHB's
would start a Dask cluster to run the objective, which the ask/tell loop does not use.

Budget accounting is `run_lcbench_mf.py`'s `Trainer`: a job for configuration c at budget b
(trained to round(b) epochs) continues from the highest epoch c was trained to, paying only
its new epochs; every trained epoch is one of the budget and an event for the incumbent (a
configuration counts once it has trained all 52 epochs). A job that asks for a configuration
another worker is still training goes on from where that one has got to when it starts.

    .venv-mf/bin/python benches/peers/lcbench_mf_parallel.py [--workers-sim 8] [--seeds 10]
        [--methods smac-mf-hb smac-hb dehb] [--held-out]

With --workers-sim 1 it makes the same calls in the same order as `run_lcbench_mf.py`.
Needs `requirements-mf.txt` (and dehb with --no-deps; see that file's head).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "lcbench"))

import lcbench  # noqa: E402
import lcbench_parallel  # noqa: E402
import run_lcbench_mf as mf  # noqa: E402

TIME = lcbench.METRICS.index("time")
METHODS = ["smac-mf-hb", "smac-hb", "dehb"]


class Optimiser:
    """One library behind ask() -> (config dict, epochs, handle) and tell(handle, accuracy, cost)."""

    def __init__(self, method: str, task: str, seed: int, budget: int):
        mf.quiet()
        self.method = method
        self.tmp = tempfile.mkdtemp(prefix=f"{method}-")
        if method.startswith("smac"):
            from smac import HyperbandFacade, MultiFidelityFacade, Scenario

            facade = MultiFidelityFacade if method == "smac-mf-hb" else HyperbandFacade
            sc = Scenario(mf.configspace(seed), deterministic=True, n_trials=mf.smac_n_trials(budget),
                          min_budget=mf.MIN_B, max_budget=mf.MAX_B, seed=seed,
                          output_directory=self.tmp, name=f"{method}-{task}")
            self.smac = facade(sc, mf._smac_dummy, intensifier=facade.get_intensifier(sc, eta=mf.ETA),
                               overwrite=True, logging_level=40)
        else:
            from dehb import DEHB

            cs = mf.configspace(seed)
            self.dehb = DEHB(cs=cs, f=None, dimensions=len(list(cs.values())), min_fidelity=mf.MIN_B,
                             max_fidelity=mf.MAX_B, eta=mf.ETA, n_workers=1, seed=seed,
                             output_path=self.tmp, save_freq="end", log_level="ERROR")
        mf.quiet()

    def ask(self):
        if self.method.startswith("smac"):
            info = self.smac.ask()
            return dict(info.config), mf.to_epochs(info.budget), info
        job = self.dehb.ask()
        return dict(job["config"]), mf.to_epochs(job["fidelity"]), job

    def tell(self, handle, acc: float, cost: int):
        if self.method.startswith("smac"):
            from smac.runhistory.dataclasses import TrialValue

            self.smac.tell(handle, TrialValue(cost=1.0 - acc / 100.0), save=False)
        else:
            self.dehb.tell(handle, {"fitness": 1.0 - acc / 100.0, "cost": float(cost)})

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_parallel(method: str, task: str, seed: int, budget: int, workers: int) -> Dict[str, Any]:
    opt = Optimiser(method, task, seed, budget)
    try:
        tr = mf.Trainer(task, budget)
        slots: List[Any] = [None] * workers
        # Each configuration's cumulative training seconds by epoch, asked of the surrogate once.
        times: Dict[int, Any] = {}
        now = 0.0

        def start_epoch(job, now):
            # The seconds of the epoch from where the configuration has got to.
            i = job["idx"]
            t = tr.trained[i] + 1
            before = float(times[i][t - 2]) if t >= 2 else 0.0
            job["done_at"] = now + max(float(times[i][t - 1]) - before, 1e-3)

        while not tr.exhausted:
            for w in range(workers):
                while slots[w] is None:
                    cfg, b, handle = opt.ask()
                    tr.n_trials += 1
                    i = tr.idx(cfg)
                    if i not in times:
                        config = dict(zip(lcbench.ORDER, tr.key(cfg)))
                        times[i] = lcbench.curves(task, [config])[0][:, TIME]
                    job = {"idx": i, "epochs": b, "handle": handle, "cost": 0}
                    if b <= tr.trained[i]:
                        # Nothing to train: told at once, as the serial harness does.
                        tr.free_trials += 1
                        opt.tell(handle, float(tr.curves[i][b - 1]), 0)
                        continue
                    if tr.trained[i] > 0:
                        tr.continued_trials += 1
                    start_epoch(job, now)
                    slots[w] = job
            w = min(range(workers), key=lambda k: slots[k]["done_at"])
            job = slots[w]
            now = job["done_at"]
            i = job["idx"]
            if tr.trained[i] >= job["epochs"]:
                # Another worker trained this configuration this far meanwhile.
                opt.tell(job["handle"], float(tr.curves[i][job["epochs"] - 1]), job["cost"])
                slots[w] = None
                continue
            try:
                tr.epoch(i, tr.trained[i] + 1)
            except mf.BudgetExhausted:
                break
            job["cost"] += 1
            if tr.trained[i] >= job["epochs"]:
                opt.tell(job["handle"], float(tr.curves[i][job["epochs"] - 1]), job["cost"])
                slots[w] = None
            else:
                start_epoch(job, now)
        return tr.result()
    finally:
        opt.close()


def run_parallel_mf(method: str, task: str, seed: int, budget: int, workers: int) -> Dict[str, Any]:
    mf.smac_n_trials(budget)
    return run_parallel(method, task, seed, budget, workers)


def main():
    lcbench_parallel.main_for(run_parallel_mf, METHODS, "SMAC3 / DEHB", __doc__)


if __name__ == "__main__":
    main()
