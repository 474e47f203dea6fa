"""Optuna 5's NSGAIISampler and TPESampler (multi-objective) on the functions of
testkit/src/mo_functions.rs, for benches/multi_objective.rs.

    python3 optuna_mo.py SEEDS FUNCTION [FUNCTION ...]

Sequential runs (one trial at a time) with each function's budget, seeds 0..SEEDS-1, each
sampler with its defaults and seed=s. Prints {"optuna": version, "runs": {function:
{"nsga2": [[values of each trial] per seed], "tpe": [...]}}, "check": {function: [[params,
values] of seed 0's first 5 NSGA-II trials]}}: the bench computes the hypervolumes itself,
and evaluates the "check" params with its own copy of the functions to make sure both sides
optimise the same thing. Runs go two at a time (one per core).

Needs optuna==5.0.0 (numpy, scipy) in the interpreter that runs it.
"""

import json
import math
import os
import sys
from multiprocessing import Pool

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ZDT_N = 30
DTLZ_N = 12


def zdt_g(x):
    s = 0.0
    for v in x[1:]:
        s += v
    return 1.0 + 9.0 * s / (len(x) - 1)


def zdt1(p):
    x = [p[f"x{i}"] for i in range(ZDT_N)]
    g = zdt_g(x)
    return [x[0], g * (1.0 - math.sqrt(x[0] / g))]


def zdt2(p):
    x = [p[f"x{i}"] for i in range(ZDT_N)]
    g = zdt_g(x)
    return [x[0], g * (1.0 - (x[0] / g) * (x[0] / g))]


def dtlz2(p):
    x = [p[f"x{i}"] for i in range(DTLZ_N)]
    g = 0.0
    for v in x[2:]:
        g += (v - 0.5) * (v - 0.5)
    a, b = x[0] * math.pi / 2.0, x[1] * math.pi / 2.0
    return [
        (1.0 + g) * math.cos(a) * math.cos(b),
        (1.0 + g) * math.cos(a) * math.sin(b),
        (1.0 + g) * math.sin(a),
    ]


def net_cost(p):
    best_log_lr = {"sgd": -1.0, "adam": -3.0}.get(p["optimizer"], -2.5)
    d = math.log10(p["lr"]) - best_log_lr
    width, depth, dropout = float(p["width"]), float(p["depth"]), p["dropout"]
    loss = (
        0.05
        + 0.1 * d * d
        + 0.5 / (1.0 + math.log2(width) * depth / 4.0)
        + 0.3 * (dropout - 0.3) * (dropout - 0.3)
    )
    latency = width * depth / 64.0 + 0.1 * depth
    return [loss, latency]


def spaces():
    import optuna.distributions as d

    unit = lambda n: {f"x{i}": d.FloatDistribution(0.0, 1.0) for i in range(n)}  # noqa: E731
    net = {
        "lr": d.FloatDistribution(1e-5, 1.0, log=True),
        "width": d.IntDistribution(8, 1024, log=True),
        "depth": d.IntDistribution(1, 8),
        "dropout": d.FloatDistribution(0.0, 0.8),
        "optimizer": d.CategoricalDistribution(["sgd", "adam", "rmsprop"]),
    }
    return {
        "ZDT1": (unit(ZDT_N), zdt1, 2, 300),
        "ZDT2": (unit(ZDT_N), zdt2, 2, 300),
        "DTLZ2": (unit(DTLZ_N), dtlz2, 3, 300),
        "NetCost": (net, net_cost, 2, 200),
    }


def run(args):
    name, algorithm, seed = args
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    space, f, objectives, budget = spaces()[name]
    if algorithm == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(directions=["minimize"] * objectives, sampler=sampler)
    values, params = [], []
    for _ in range(budget):
        trial = study.ask(space)
        v = f(trial.params)
        study.tell(trial, v)
        values.append(v)
        params.append(trial.params)
    return name, algorithm, seed, values, params[:5]


def main():
    import optuna

    seeds = int(sys.argv[1])
    names = sys.argv[2:] or list(spaces())
    jobs = [(n, a, s) for n in names for a in ("nsga2", "tpe") for s in range(seeds)]
    runs = {n: {"nsga2": [None] * seeds, "tpe": [None] * seeds} for n in names}
    check = {}
    with Pool(2) as pool:
        for name, algorithm, seed, values, first in pool.imap_unordered(run, jobs):
            runs[name][algorithm][seed] = values
            if algorithm == "nsga2" and seed == 0:
                check[name] = [[p, v] for p, v in zip(first, values)]
    print(json.dumps({"optuna": optuna.__version__, "runs": runs, "check": check}))


if __name__ == "__main__":
    main()
