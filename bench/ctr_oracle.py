#!/usr/bin/python3
"""How much of the planted click model the best-specified learner recovers
from a given number of lines (docs/benchmarks.md, "the C++ workers"): trains,
in plain PyTorch, a model of exactly the planted form of tools/make_ctr_data
- a weight per category, a linear term of the log-counts, and for the six
planted field pairs the dot product of per-category K-vectors - by
Adagrad, one pass, and prints its test AUC each epoch next to the planted
AUC. What it misses is what the lines cannot tell, not what a model lacks.

    bench/ctr_oracle.py --data DIR [--limit LINES] [--epochs 1] [--lr 0.1]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "torch", "ctr"))
import ctr_data  # noqa: E402

from planted import generator as planted  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="train.tsv, test.tsv, planted.txt")
    p.add_argument("--limit", type=int, default=0, help="training lines (0: all)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.1, help="Adagrad on every table")
    p.add_argument("--batch", type=int, default=256)
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    ytr, xtr, itr = ctr_data.read_tsv(os.path.join(a.data, "train.tsv"), a.limit)
    yte, xte, ite = ctr_data.read_tsv(os.path.join(a.data, "test.tsv"))
    uniq, inv = np.unique(np.concatenate([itr.ravel(), ite.ravel()]), return_inverse=True)
    inv = torch.from_numpy(inv.reshape(-1, planted.FIELDS))
    itr, ite = inv[:len(ytr)], inv[len(ytr):]
    n = len(uniq)
    wide = nn.Embedding(n, 1, sparse=True)
    nn.init.zeros_(wide.weight)
    vec = nn.Embedding(n, planted.K, sparse=True)
    nn.init.normal_(vec.weight, std=0.1)
    lin = nn.Linear(planted.INTS, 1)

    def logit(ids, x):
        z = wide(ids).sum((1, 2)) + lin(x).squeeze(1)
        v = vec(ids)
        for f, g in planted.PAIRS:
            z = z + (v[:, f] * v[:, g]).sum(1)
        return z

    sparse = torch.optim.Adagrad(list(wide.parameters()) + list(vec.parameters()), lr=a.lr)
    dense = torch.optim.Adam(lin.parameters(), lr=0.001)
    xtr, ytr, xte = torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte)
    bce = nn.BCEWithLogitsLoss()
    want = open(os.path.join(a.data, "planted.txt")).read().split()
    print(f"lines {len(ytr)} rows {n} planted_auc {want[want.index('planted_auc') + 1]}")
    for epoch in range(a.epochs):
        start = time.time()
        order = torch.randperm(len(ytr))
        for s in range(0, len(ytr), a.batch):
            b = order[s:s + a.batch]
            loss = bce(logit(itr[b], xtr[b]), ytr[b])
            sparse.zero_grad()
            dense.zero_grad()
            loss.backward()
            sparse.step()
            dense.step()
        with torch.no_grad():
            z = torch.cat([logit(ite[s:s + 8192], xte[s:s + 8192])
                           for s in range(0, len(yte), 8192)]).numpy()
        print(f"epoch {epoch + 1} test_auc {ctr_data.auc(z, yte):.4f} "
              f"seconds {time.time() - start:.0f}", flush=True)


if __name__ == "__main__":
    main()
