"""Fashion-MNIST in one plain PyTorch process. fulcrum_train.py is this
script as a Fulcrum worker: docs/pytorch.md shows the lines that differ.

    /usr/bin/python3 examples/torch/train.py --model cnn
"""

import argparse
import time

import torch
import torch.nn.functional as F

import fmnist

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
p.add_argument("--data", default=fmnist.DATA)
p.add_argument("--epochs", type=int, default=8)
p.add_argument("--batch_size", type=int, default=128)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=1)
args = p.parse_args()

torch.manual_seed(args.seed)
model = fmnist.make(args.model)
train = fmnist.load(args.data, "train", args.model)
test = fmnist.load(args.data, "t10k", args.model)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
steps = args.epochs * -(-len(train) // args.batch_size)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True)

start, step = time.monotonic(), 0
for epoch in range(args.epochs):
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        schedule.step()
        step += 1
    print(f"epoch {epoch} step {step} loss {loss.item():.4f} "
          f"test accuracy {fmnist.accuracy(model, test):.4f} "
          f"({time.monotonic() - start:.0f} s)", flush=True)
