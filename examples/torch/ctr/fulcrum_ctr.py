"""The wide & deep click model trained as a Fulcrum job (ctr.yaml): the
dense MLP on the shards like any fulcrum.torch model, the categories' rows
in the job's embedding tables. Start one per worker:

    /usr/bin/python3 examples/torch/ctr/fulcrum_ctr.py --coordinator HOST:PORT \
        --job JOB --data DIR        # DIR: train.tsv, test.tsv (make_ctr_data)

Rank 0 evaluates the test split at the end (AUC and log-loss) and reports
the AUC as the job's accuracy.
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import fulcrum.torch
from ctr_data import auc, logloss, read_tsv
from ctr_model import WideDeep

p = argparse.ArgumentParser()
p.add_argument("--coordinator", required=True)
p.add_argument("--job", required=True)
p.add_argument("--data", required=True, help="a directory with train.tsv and test.tsv")
p.add_argument("--train_limit", type=int, default=0, help="read the first N lines (0: all)")
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(1)  # the first worker uploads the MLP's initial values
labels, dense, ids = read_tsv(os.path.join(args.data, "train.tsv"), args.train_limit)
train = torch.utils.data.TensorDataset(torch.from_numpy(ids), torch.from_numpy(dense),
                                       torch.from_numpy(labels))
model = WideDeep(lambda table, dim: fulcrum.torch.EmbeddingBag(table, dim, mode="sum"))
w = fulcrum.torch.Worker(model, coordinator=args.coordinator, job=args.job)
print(f"joined {args.job} as rank {w.rank} of {w.world_size} at step {w.step_num}", flush=True)


def evaluate():
    y, x, i = read_tsv(os.path.join(args.data, "test.tsv"))
    model.eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(y), 8192):
            out.append(torch.sigmoid(model(torch.from_numpy(i[s:s + 8192]),
                                           torch.from_numpy(x[s:s + 8192]))).numpy())
    model.train()
    prob = np.concatenate(out)
    return auc(prob, y), logloss(prob, y)


start, samples = time.monotonic(), 0
with w:
    for i, x, y in w.data(train):
        loss = F.binary_cross_entropy_with_logits(model(i, x), y)
        loss.backward()
        if w.step():
            samples += len(y)
    elapsed = time.monotonic() - start
    if w.rank == 0:
        a, ll = evaluate()
        w.report(loss=ll, accuracy=a)
        print(f"done at step {w.step_num}: test auc {a:.4f} logloss {ll:.4f}", flush=True)
    print(f"summary rank {w.rank} steps {w.step_num} samples {samples} "
          f"elapsed_s {elapsed:.2f}", flush=True)
