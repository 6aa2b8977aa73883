#!/usr/bin/python3
"""The peer of bench/torch_vs_ddp.sh: examples/torch/train.py's CNN under
PyTorch DistributedDataParallel (gloo, CPU), with the recipe of
examples/torch/fashion_mnist_cnn.yaml: batch 64 per process, momentum SGD lr
0.05 with a cosine schedule over 3752 steps, rank 0 evaluating on the whole
test set every --eval_every steps and everyone stopping once it reaches
--target.

Prints one JSON line: steps, seconds in the loop, seconds evaluating,
seconds to the target (null if not reached), final accuracy.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "examples", "torch"))
import fmnist  # noqa: E402
from gloo_ranks import run_ranks  # noqa: E402


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(1)
    model = fmnist.make("cnn")
    ddp = DistributedDataParallel(model)
    train = fmnist.load(args.data, "train", "cnn")
    test = fmnist.load(args.data, "t10k", "cnn")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 3752)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train, num_replicas=args.world, rank=rank, shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(train, batch_size=64, sampler=sampler)
    dist.barrier()
    start, evaluating, reached, acc, step = time.monotonic(), 0.0, None, 0.0, 0
    stop = torch.zeros(1)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
            schedule.step()
            step += 1
            if step % args.eval_every == 0:
                if rank == 0:
                    t = time.monotonic()
                    acc = fmnist.accuracy(model, test)
                    evaluating += time.monotonic() - t
                    if acc >= args.target and reached is None:
                        reached = time.monotonic() - start
                        stop.fill_(1)
                dist.broadcast(stop, 0)
                if stop.item():
                    break
        if stop.item():
            break
    elapsed = time.monotonic() - start
    if rank == 0:
        queue.put({"steps": step, "elapsed_s": elapsed, "eval_s": evaluating,
                   "to_target_s": reached, "test_accuracy": acc})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--eval_every", type=int, default=235)
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--data", default=fmnist.DATA)
    args = p.parse_args()
    print(json.dumps(run_ranks(worker, args, args.world, timeout_s=3600)))


if __name__ == "__main__":
    main()
