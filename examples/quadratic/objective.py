"""A stand-in for a training script: reports a loss per epoch and obeys tune's decisions.

Protocol: print one JSON object per report to stdout, then read one line from stdin:
"continue" or "stop". Parameters arrive as argv (see space.toml) and as JSON in TUNE_PARAMS,
which also holds the conditional ones (momentum only exists for sgd).
"""
import argparse
import json
import math
import os
import sys

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, required=True)
p.add_argument("--lr", type=float, required=True)
p.add_argument("--units", type=int, required=True)
p.add_argument("--optimizer", choices=["sgd", "adam"], required=True)
args = p.parse_args()
params = json.loads(os.environ["TUNE_PARAMS"])

# The best x is 2; lr near 1e-2, more units and adam (or sgd with high momentum) help a little.
floor = (args.x - 2.0) ** 2 + 0.1 * (math.log10(args.lr) + 2.0) ** 2 + 20.0 / args.units
if args.optimizer == "sgd":
    floor += 0.5 * (0.99 - params["momentum"])
for epoch in range(1, 11):
    loss = floor + 5.0 / epoch
    print(json.dumps({"step": epoch, "loss": loss, "dropout": params["dropout"]}))
    if sys.stdin.readline().strip() != "continue":
        break
