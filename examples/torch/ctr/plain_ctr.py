"""The same wide & deep model in one plain PyTorch process: the tables as
torch.nn.EmbeddingBag(sparse=True) over hashed indices (--rows rows each,
as many as the Fulcrum job's capacity), SparseAdam for them and Adam for the
MLP - the peer bench/ctr_vs_torch.sh compares Fulcrum with.

    /usr/bin/python3 examples/torch/ctr/plain_ctr.py --data DIR
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ctr_data import auc, logloss, read_tsv
from ctr_model import WideDeep

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--rows", type=int, default=8000000, help="rows of each table (hashed)")
p.add_argument("--batch", type=int, default=512, help="the Fulcrum job's global batch")
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--train_limit", type=int, default=0)
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(1)


def index(ids):
    """uint64 ids (as int64) to rows of a table of args.rows, by hashing."""
    h = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    return torch.from_numpy((h % np.uint64(args.rows)).astype(np.int64))


y, x, i = read_tsv(os.path.join(args.data, "train.tsv"), args.train_limit)
ty, tx, ti = read_tsv(os.path.join(args.data, "test.tsv"))
Y, X, I = torch.from_numpy(y), torch.from_numpy(x), index(i)
model = WideDeep(lambda table, dim: nn.EmbeddingBag(args.rows, dim, mode="sum", sparse=True))
nn.init.zeros_(model.wide.weight)
nn.init.uniform_(model.deep.weight, -0.01, 0.01)
sparse = torch.optim.SparseAdam([model.wide.weight, model.deep.weight], lr=0.01)
dense = torch.optim.Adam(model.mlp.parameters(), lr=0.001)
start = time.monotonic()
for epoch in range(args.epochs):
    perm = torch.randperm(len(Y), generator=torch.Generator().manual_seed(epoch))
    for s in range(0, len(Y), args.batch):
        b = perm[s:s + args.batch]
        loss = F.binary_cross_entropy_with_logits(model(I[b], X[b]), Y[b])
        sparse.zero_grad()
        dense.zero_grad()
        loss.backward()
        sparse.step()
        dense.step()
elapsed = time.monotonic() - start
with torch.no_grad():
    prob = torch.sigmoid(model(index(ti), torch.from_numpy(tx))).numpy()
print(f"done: test auc {auc(prob, ty):.4f} logloss {logloss(prob, ty):.4f}")
print(f"summary samples {len(Y) * args.epochs} elapsed_s {elapsed:.2f} "
      f"samples_per_s {len(Y) * args.epochs / elapsed:.0f}")
