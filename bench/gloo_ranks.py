"""Runs one function as the ranks of a local gloo group, for the PyTorch
peers of the benchmarks (ddp_peer.py, ddp_cnn_peer.py, gloo_allreduce.py):
a free loopback port, `world` spawned processes calling
target(rank, args, port, queue), and the first report a rank puts on the
queue. A rank that dies or a run past `timeout_s` is an error, not a hang."""
import queue as queue_module
import socket
import time

import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(target, args, world, timeout_s):
    port = free_port()
    ctx = mp.get_context("spawn")
    reports = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, args, port, reports))
             for r in range(world)]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return reports.get(timeout=1)
            except queue_module.Empty:
                pass
            for rank, proc in enumerate(procs):
                if proc.exitcode not in (None, 0):
                    raise RuntimeError(f"rank {rank} exited with {proc.exitcode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no report within {timeout_s} s")
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.terminate()


