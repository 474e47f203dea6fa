"""One training epoch of the models in benches/train_epoch.rs, in PyTorch.

    python3 torch_epoch.py REPO_ROOT [cpu|cuda]

Same data (the digits shipped in trials/data, 1,438 training rows after the 20% hold-out),
same shapes, AdamW, batch 64, shuffled each epoch. Prints one JSON object:
{"torch": version, "threads": n, "device": ..., "mlp_ms": median ms per epoch, "cnn_ms": ...}.
On a GPU the data lives there and each epoch ends with a synchronize, as tune's epoch ends
reading its loss back.
"""
import gzip
import json
import os
import statistics
import sys
import time

import torch
from torch import nn

EPOCHS = int(os.environ.get("TUNE_BENCH_EPOCHS", "10"))


def load(root):
    rows = [
        [float(v) for v in line.split(",")]
        for line in gzip.open(os.path.join(root, "trials/data/digits.csv.gz"), "rt")
        if line.strip()
    ]
    x = torch.tensor([r[:-1] for r in rows], dtype=torch.float32)
    y = torch.tensor([int(r[-1]) for r in rows], dtype=torch.long)
    x = (x - x.mean(0)) / x.std(0).clamp_min(1e-6)
    n_val = round(len(rows) * 0.2)
    return x[n_val:], y[n_val:]


def mlp():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


class Cnn(nn.Module):
    def __init__(self, c=16, width=64):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, 2 * c, 3, padding=1)
        self.dense = nn.Linear(2 * c * 16, width)
        self.out = nn.Linear(width, 10)

    def forward(self, x):
        x = x.view(-1, 1, 8, 8)
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        x = torch.max_pool2d(x, 2).flatten(1)
        return self.out(torch.relu(self.dense(x)))


def epoch_ms(model, x, y):
    model = model.to(x.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for e in range(EPOCHS + 1):
        start = time.perf_counter()
        order = torch.randperm(len(y), device=x.device)
        for i in range(0, len(y), 64):
            idx = order[i : i + 64]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        if x.is_cuda:
            torch.cuda.synchronize()
        if e > 0:  # the first epoch warms up
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    root = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    torch.manual_seed(0)
    x, y = load(root)
    x, y = x.to(device), y.to(device)
    print(json.dumps({
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "mlp_ms": epoch_ms(mlp(), x, y),
        "cnn_ms": epoch_ms(Cnn(), x, y),
    }))


if __name__ == "__main__":
    main()
