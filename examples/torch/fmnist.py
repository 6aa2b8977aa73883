"""Fashion-MNIST for the PyTorch examples: the IDX files read directly (the
Debian package dataset-fashion-mnist installs them gzipped) and the two
reference models, the MLP 784-256-128-10 (its parameters named like
fulcrum-worker's, so that both can train one job) and a 2-conv + pooling
CNN."""

import gzip
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # of the training images


def _read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read()


def _file(directory, name):
    plain = os.path.join(directory, name)
    return plain if os.path.exists(plain) else plain + ".gz"


def load(directory=DATA, split="train", model="cnn"):
    """A TensorDataset of `split` ("train" or "t10k"): images [n, 1, 28, 28]
    and labels [n]. The MLP sees pixels scaled to [0, 1], as fulcrum-worker
    reads them (so both can train one job); the CNN normalized ones."""
    raw = _read(_file(directory, f"{split}-images-idx3-ubyte"))
    magic, n, rows, cols = struct.unpack(">iiii", raw[:16])
    if magic != 0x803:
        raise ValueError(f"{split} images: not an IDX image file (magic {magic:#x})")
    x = torch.frombuffer(bytearray(raw[16:]), dtype=torch.uint8).float() / 255.0
    x = x.view(n, 1, rows, cols)
    if model == "cnn":
        x = (x - MEAN) / STD
    raw = _read(_file(directory, f"{split}-labels-idx1-ubyte"))
    y = torch.frombuffer(bytearray(raw[8:]), dtype=torch.uint8).long()
    return torch.utils.data.TensorDataset(x, y)


class Mlp(nn.Module):
    """The reference MLP 784-256-128-10 (fc1, fc2, fc3 as fulcrum-worker)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class Cnn(nn.Module):
    """2 conv + pooling layers, then 2 fully connected (421 k parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.dropout(F.relu(self.fc1(x.flatten(1))), 0.3, self.training)
        return self.fc2(x)


def make(name):
    return {"mlp": Mlp, "cnn": Cnn}[name]()


def accuracy(model, dataset, batch=2000):
    """Test accuracy of `model` on `dataset` (eval mode, then back)."""
    was = model.training
    model.eval()
    x, y = dataset.tensors
    device = next(model.parameters()).device
    with torch.no_grad():
        right = sum((model(x[i:i + batch].to(device)).argmax(1).cpu() == y[i:i + batch])
                    .sum().item() for i in range(0, len(y), batch))
    model.train(was)
    return right / len(y)
