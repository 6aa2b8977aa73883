#!/usr/bin/python3
"""The peer Fulcrum is measured against: PyTorch DistributedDataParallel (gloo,
CPU, one thread per process) training the same MLP on the same data with the
same per-worker batch, data split and optimizer as a Fulcrum sync job; with
--plain, one plain PyTorch process (no process group, no DDP wrapper).

Prints one JSON line: steady-state samples/s (after warm-up), wall time of the
whole run, and final test accuracy.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from gloo_ranks import run_ranks
import torch.nn as nn


def load(directory, prefix):
    with gzip.open(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return x, y


def worker(rank, args, port, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if not args.plain:
        dist.init_process_group("gloo", rank=rank, world_size=args.world)
    start = time.perf_counter()
    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "t10k")
    mean, std = xtr.mean() / 255.0, xtr.std() / 255.0
    xtr = torch.from_numpy(((xtr / 255.0 - mean) / std).astype(np.float32))
    ytr = torch.from_numpy(ytr.astype(np.int64))
    xte = torch.from_numpy(((xte / 255.0 - mean) / std).astype(np.float32))
    yte = torch.from_numpy(yte.astype(np.int64))
    torch.manual_seed(args.seed)
    layers = []
    sizes = [784, 256, 128, 10]
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    if not args.plain:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    n = xtr.shape[0]
    global_batch = args.batch * args.world
    per_epoch = (n + global_batch - 1) // global_batch
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(n, generator=g)
    t_warm = None
    for step in range(args.steps):
        if step == args.warmup:
            if not args.plain:
                dist.barrier()
            t_warm = time.perf_counter()
        s = step % per_epoch
        if s == 0 and step > 0:
            order = torch.randperm(n, generator=g)
        lo = min(n, s * global_batch + rank * args.batch)
        hi = min(n, lo + args.batch)
        idx = order[lo:hi]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
    if not args.plain:
        dist.barrier()
    end = time.perf_counter()
    if rank == 0:
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        timed = args.steps - args.warmup
        queue.put({
            "samples_per_sec": timed * global_batch / (end - t_warm),
            "wall_s": end - start,
            "test_accuracy": acc,
        })
    if not args.plain:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--plain", action="store_true",
                   help="one plain process: no process group, no DDP wrapper "
                        "(the peer of a one-worker job; needs --world 1)")
    args = p.parse_args()
    if args.plain and args.world != 1:
        p.error("--plain needs --world 1")
    print(json.dumps(run_ranks(worker, args, args.world, timeout_s=3600)))


if __name__ == "__main__":
    main()
