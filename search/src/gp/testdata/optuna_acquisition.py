"""Writes optuna_acquisition.json: where Optuna 5.0.0's GPSampler's acquisition search
(optuna._gp.optim_mixed.optimize_acqf_mixed with its defaults, log EI, the best trial as a
warm start) ends on Hartmann6 data, for searcher.rs's tests.

    python3 optuna_acquisition.py > optuna_acquisition.json    # optuna==5.0.0, torch, numpy

Each case: 30 uniform random points and their Hartmann6 values, and the log EI Optuna reaches
(the same from 5 random streams, so it is the search's answer, not luck).
"""
import json

import numpy as np
from optuna._gp import acqf, gp, optim_mixed, prior, search_space
from optuna.distributions import FloatDistribution

from optuna_fits import hartmann6

space = search_space.SearchSpace({f"x{i}": FloatDistribution(0, 1) for i in range(6)})
cases = []
for seed in [1, 2, 4]:
    rng = np.random.RandomState(seed)
    x = rng.rand(30, 6)
    f = np.array([hartmann6(p) for p in x])
    y = -f
    y = (y - y.mean()) / y.std()
    g = gp.fit_kernel_params(x, y, np.zeros(6, dtype=bool), prior.default_log_prior, 1e-6, False)
    a = acqf.LogEI(gpr=g, search_space=space, threshold=y.max())
    found = [
        float(optim_mixed.optimize_acqf_mixed(
            a, warmstart_normalized_params_array=x[np.argmax(y)][None, :],
            rng=np.random.RandomState(k))[1])
        for k in range(5)
    ]
    assert max(found) - min(found) < 1e-6, found
    cases.append({"x": x.tolist(), "f": f.tolist(), "log_ei": found[0]})
print(json.dumps(cases))
