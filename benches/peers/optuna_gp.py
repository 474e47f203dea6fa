"""Optuna 5's GPSampler on the functions of benches/peers/functions.py, for benches/search_quality.rs.

    python3 optuna_gp.py PEERS_DIR quality SEEDS [FUNCTION ...]
    python3 optuna_gp.py PEERS_DIR timing TRIALS FUNCTION

quality: sequential runs (one trial at a time) with each function's budget, seeds 0..SEEDS-1,
GPSampler(seed=s) with its defaults; prints {"optuna": version, "torch": version,
"regrets": {function: [final regret per seed]}}. Runs go two at a time (one per core), each
in its own process limited to one thread, as the bench's machine has two cores.

timing: one run of TRIALS trials (seed 0), printing {"seconds": [time of each study.ask]}:
the sampler's whole work for a trial (fit, acquisition), as a user waits for it.

Needs optuna==5.0.0, numpy, scipy, torch (CPU is enough) and greenlet in the interpreter that
runs it: without greenlet, GPSampler falls back to a sequential, slower acquisition search
(it says so on stderr).
"""

import json
import os
import sys
import time
from multiprocessing import Pool

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

BENCH = sys.argv[1]
sys.path.insert(0, BENCH)

import adapters  # noqa: E402
import functions  # noqa: E402


def run(args):
    name, seed, trials = args
    import optuna
    import torch

    torch.set_num_threads(1)
    adapters.quiet_libraries()
    # "Study already converged" and the like, once per trial.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    bench = functions.get(name)
    distributions = adapters.optuna_distributions(bench.space)
    sampler = optuna.samplers.GPSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    best = float("inf")
    seconds = []
    for _ in range(trials):
        started = time.perf_counter()
        trial = study.ask(distributions)
        seconds.append(time.perf_counter() - started)
        value = bench(trial.params)
        best = min(best, value)
        study.tell(trial, value)
    return name, seed, best - bench.known_min, seconds


def main():
    mode = sys.argv[2]
    import optuna
    import torch

    if mode == "quality":
        seeds = int(sys.argv[3])
        names = sys.argv[4:] or list(functions.BENCHMARKS)
        jobs = [(n, s, functions.get(n).budget) for n in names for s in range(seeds)]
        regrets = {n: [None] * seeds for n in names}
        with Pool(2) as pool:
            for name, seed, regret, _ in pool.imap_unordered(run, jobs):
                regrets[name][seed] = regret
        out = {"optuna": optuna.__version__, "torch": torch.__version__, "regrets": regrets}
    elif mode == "timing":
        _, _, _, seconds = run((sys.argv[4], 0, int(sys.argv[3])))
        out = {"optuna": optuna.__version__, "torch": torch.__version__, "seconds": seconds}
    else:
        sys.exit(f"unknown mode {mode!r}: quality or timing")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
