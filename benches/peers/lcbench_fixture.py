#!/usr/bin/env python3
"""Writes what the Rust LCBench surrogate is checked and scored against, from the
Python one (benches/peers/lcbench/lcbench.py, onnxruntime):

- cli/tests/fixtures/lcbench_points.json: 400 surrogate calls (task, the 8 raw inputs, the 6
  outputs), drawn at random over every task, epoch and the space's corners;
- benches/data/lcbench_references.json: per task, run_lcbench.py's normalised-regret anchors
  (best and median val_accuracy at epoch 52 of its 20,000 random configurations).

    python3 benches/peers/lcbench_fixture.py   # from the repository root; needs numpy, onnxruntime
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benches", "peers")
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(BENCH, "lcbench"))

import numpy as np  # noqa: E402

import lcbench  # noqa: E402
import run_lcbench  # noqa: E402


def points(n=400, seed=7):
    rng = np.random.default_rng(seed)
    cfgs = lcbench.sample_configs(rng, n)
    out = []
    for i, cfg in enumerate(cfgs):
        if i < 32:  # the space's corners, low and high
            for j, k in enumerate(lcbench.ORDER):
                s = lcbench.SPACE[k]
                cfg[k] = s["high"] if (i >> (j % 5)) & 1 else s["low"]
        task = lcbench.TASKS[i % len(lcbench.TASKS)]
        epoch = 1 + (i * 7) % lcbench.MAX_EPOCH if i % 9 else lcbench.MAX_EPOCH
        row = [float(epoch)] + [float(cfg[k]) for k in lcbench.ORDER]
        outputs = lcbench.evaluate(task, [row])[0]
        # The inputs as the float32s onnxruntime saw; outputs as printed floats.
        out.append({"task": task, "inputs": [float(np.float32(v)) for v in row],
                    "outputs": [float(v) for v in outputs]})
    return out


def main():
    fixtures = os.path.join(ROOT, "tests", "fixtures")
    with open(os.path.join(fixtures, "lcbench_points.json"), "w") as fh:
        head = json.dumps({"order": ["epoch"] + lcbench.ORDER, "metrics": lcbench.METRICS})
        fh.write(head[:-1] + ', "points": [\n' + ",\n".join(json.dumps(p) for p in points())
                 + "\n]}\n")
    refs = {t: run_lcbench.reference(t) for t in lcbench.TASKS}
    with open(os.path.join(ROOT, "benches", "data", "lcbench_references.json"), "w") as fh:
        json.dump({"about": "run_lcbench.reference(task): best and median val_accuracy at epoch 52 "
                            "of 20,000 random configurations (numpy seed 12345)",
                   "dev_tasks": lcbench.DEV_TASKS, "references": refs}, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
