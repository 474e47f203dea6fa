"""Writes yeo_johnson.json: scikit-learn's Yeo-Johnson power transform (PowerTransformer,
standardize=True) of a few sets of losses as HEBO applies it (the losses over their standard
deviation), with the exponent it fits, for `warp.rs`'s test.

    python -m venv venv && venv/bin/pip install scikit-learn==1.7.2
    venv/bin/python yeo_johnson.py > yeo_johnson.json
"""
import json

import numpy as np
import sklearn
from sklearn.preprocessing import PowerTransformer

rng = np.random.default_rng(0)
sets = {
    # Branin-like: a long right tail above a positive minimum.
    "right_tail": 0.4 + rng.exponential(30.0, 40) ** 1.5,
    # Hartmann6-like: negative values with a few deep ones.
    "negative": -3.3 * rng.beta(0.6, 3.0, 30),
    # Both signs, roughly symmetric.
    "both_signs": rng.normal(0.2, 1.0, 25),
    # A loss spread over six decades (LogBowl-like).
    "decades": 10.0 ** rng.uniform(-6.0, 0.0, 30),
}
out = {"sklearn": sklearn.__version__, "sets": []}
for name, loss in sets.items():
    x = (loss / loss.std()).reshape(-1, 1)
    pt = PowerTransformer(method="yeo-johnson", standardize=True).fit(x)
    out["sets"].append({
        "name": name,
        "loss": loss.tolist(),
        "lambda": float(pt.lambdas_[0]),
        "transformed": pt.transform(x).ravel().tolist(),
    })
print(json.dumps(out, indent=1))
