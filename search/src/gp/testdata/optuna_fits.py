"""Writes optuna_fits.json: Optuna 5.0.0's GP kernel fits (optuna._gp.gp.fit_kernel_params with
its default prior, minimum noise 1e-6) on a few data sets, for model.rs's tests.

    python3 optuna_fits.py > optuna_fits.json    # optuna==5.0.0, torch (CPU), numpy

Data: Hartmann6 at uniform random points (values negated and standardised, as the sampler
does), and a space with a categorical dimension (3 choices, Hamming distance).
"""
import json

import numpy as np
from optuna._gp import gp, prior


def hartmann6(x):
    alpha = np.array([1.0, 1.2, 3.0, 3.2])
    a = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                  [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
    p = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
    return -np.sum(alpha * np.exp(-np.sum(a * (x - p) ** 2, axis=1)))


def case(x, f, categorical):
    y = -np.asarray(f)
    y = (y - y.mean()) / y.std()
    g = gp.fit_kernel_params(x, y, np.asarray(categorical), prior.default_log_prior, 1e-6, False)
    loss = -(g.marginal_log_likelihood() + prior.default_log_prior(g)).item()
    return {
        "x": x.tolist(), "y": y.tolist(), "categorical": categorical,
        "inverse_squared_lengthscales": g.inverse_squared_lengthscales.tolist(),
        "kernel_scale": g.kernel_scale.item(), "noise_var": g.noise_var.item(), "loss": loss,
    }


def main():
    cases = []
    for seed, n in [(3, 20), (8, 40)]:
        rng = np.random.RandomState(seed)
        x = rng.rand(n, 6)
        cases.append(case(x, [hartmann6(p) for p in x], [False] * 6))
    rng = np.random.RandomState(5)
    x = np.column_stack([rng.rand(25, 3), rng.randint(0, 3, 25)]).astype(float)
    f = [(p[0] - 0.3) ** 2 + np.sin(5 * p[1]) + 0.5 * p[2] + [0.0, 0.4, -0.2][int(p[3])] for p in x]
    cases.append(case(x, f, [False, False, False, True]))
    print(json.dumps(cases))


if __name__ == "__main__":
    main()
