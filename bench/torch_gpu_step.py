#!/usr/bin/env python3
"""The PyTorch peer of bench/gpu_step.cc: the same MLPs (ReLU, softmax
cross-entropy), the same batch, forward + backward per step, on the same
GPU. Prints lines in gpu_step's format with device "torch:<name>".

    python3 bench/torch_gpu_step.py [--batch 64] [--steps 200] [--tf32]
"""
import argparse
import time

import torch


def step_ms(layers, batch, steps, device):
    mods = []
    for i in range(len(layers) - 1):
        mods.append(torch.nn.Linear(layers[i], layers[i + 1]))
        if i + 2 < len(layers):
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).to(device)
    x = torch.rand(batch, layers[0], device=device)
    y = torch.arange(batch, device=device) % layers[-1]
    loss_fn = torch.nn.CrossEntropyLoss()

    def run(n):
        for _ in range(n):
            model.zero_grad(set_to_none=False)
            loss_fn(model(x), y).backward()
        torch.cuda.synchronize()

    run(20)
    start = time.perf_counter()
    run(steps)
    return (time.perf_counter() - start) * 1e3 / steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--tf32", action="store_true")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    device = torch.device("cuda:0")
    name = torch.cuda.get_device_name(0).replace(" ", "_")
    for layers in ([784, 256, 128, 10], [784, 4096, 4096, 10]):
        print("model %s device torch:%s batch %d ms_per_step %.4f" % (
            "-".join(map(str, layers)), name, a.batch,
            step_ms(layers, a.batch, a.steps, device)))


if __name__ == "__main__":
    main()
