#!/usr/bin/env python3
"""The PyTorch peer of bench/gpu_step.cc: the same MLPs (ReLU, softmax
cross-entropy), the same batch, forward + backward per step, on the same
GPU. Prints lines in gpu_step's format with device "torch:<name>". Then
the recommender model (gpu_step's embedding_mlp): nn.EmbeddingBag(sum,
sparse=True) over a local table of 1 M rows of dim 16 for the 26 fields,
bottom MLP 13-64-16, top 128-64-1 over the concatenation, logistic loss,
batch 2048 - forward + backward per step.

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


def embedding_step_ms(batch, steps, device, fields=26, dim=16, rows=1 << 20):
    bag = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True).to(device)
    bottom = torch.nn.Sequential(torch.nn.Linear(13, 64), torch.nn.ReLU(),
                                 torch.nn.Linear(64, 16), torch.nn.ReLU()).to(device)
    top = torch.nn.Sequential(torch.nn.Linear(fields * dim + 16, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 1)).to(device)
    g = torch.Generator(device="cpu").manual_seed(1)
    # Zipf-like ids, like gpu_step's; eight batches used in turn.
    ids = [(rows ** torch.rand(batch * fields, generator=g)).long().clamp(max=rows - 1).to(device)
           for _ in range(8)]
    dense = (3 * torch.rand(batch, 13, generator=g)).to(device)
    labels = (torch.rand(batch, generator=g) < 0.25).float().to(device)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    params = list(bag.parameters()) + list(bottom.parameters()) + list(top.parameters())

    def run(n):
        for i in range(n):
            for p in params:
                p.grad = None
            e = bag(ids[i % 8].view(-1, 1)).view(batch, fields * dim)
            z = top(torch.cat([e, bottom(dense)], dim=1)).squeeze(1)
            loss_fn(z, labels).backward()
        torch.cuda.synchronize()

    run(10)
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
    print("model embedding_mlp-26x16-64-16-128-64-1 device torch:%s batch %d "
          "ms_per_step %.4f" % (name, 2048,
                                embedding_step_ms(2048, max(5, a.steps // 4), device)))


if __name__ == "__main__":
    main()
