#!/usr/bin/python3
"""The peer of bench/exchange.sh: gloo's all-reduce of one fp32 tensor of
--floats elements among --world processes (Debian's PyTorch, one thread
each). Prints rank 0's "median_us p10_us p90_us" over --steps after
--warmup."""
import argparse
import os
import time

import torch
import torch.distributed as dist

from gloo_ranks import run_ranks


def run(rank, args, port, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    t = torch.full((args.floats,), 1e-6)
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        dist.all_reduce(t)
        if step >= args.warmup:
            times.append((time.perf_counter() - start) * 1e6)
    dist.destroy_process_group()
    if rank == 0:
        times.sort()
        queue.put(f"{times[len(times) // 2]:.0f} {times[len(times) // 10]:.0f} "
                  f"{times[len(times) * 9 // 10]:.0f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--floats", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    print(run_ranks(run, args, args.world, timeout_s=600))


if __name__ == "__main__":
    main()
