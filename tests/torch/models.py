"""The models and data the PyTorch tests train: a 2-conv + pooling CNN and
the reference MLP (named like fulcrum-worker's: fc1, fc2, ...), on
synthetic images a linear rule labels (learnable, no dataset needed)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Cnn(nn.Module):
    def __init__(self, side=12, classes=4, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.fc = nn.Linear(2 * width * (side // 4) ** 2, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class BnCnn(Cnn):
    """The CNN with BatchNorm on its input and after conv1: buffers."""

    def __init__(self, side=12, classes=4, width=8):
        super().__init__(side, classes, width)
        self.bn0 = nn.BatchNorm2d(1)
        self.bn1 = nn.BatchNorm2d(width)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(self.bn0(x)))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class Mlp(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = len(sizes) - 1
        for i in range(self.layers):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x):
        x = x.flatten(1)
        for i in range(self.layers):
            x = getattr(self, f"fc{i + 1}")(x)
            if i + 1 < self.layers:
                x = F.relu(x)
        return x


def synthetic(n=600, side=12, classes=4, seed=9):
    """(images [n, 1, side, side], labels [n]) of a linear rule."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, side, side, generator=g)
    w = torch.randn(side * side, classes, generator=g)
    y = (x.flatten(1) @ w).argmax(1)
    return torch.utils.data.TensorDataset(x, y)


def write_idx(directory, train=600, test=200, side=12, classes=4, seed=5):
    """Fashion-MNIST-like IDX files (uint8 images of class templates plus
    noise) that fulcrum-worker and these tests read alike."""
    import os
    import struct
    os.makedirs(directory, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    templates = torch.randint(0, 256, (classes, side * side), generator=g).float()
    for split, n in (("train", train), ("t10k", test)):
        labels = torch.randint(0, classes, (n,), generator=g)
        noise = torch.randint(0, 256, (n, side * side), generator=g).float()
        images = (0.7 * templates[labels] + 0.3 * noise).clamp(0, 255).to(torch.uint8)
        with open(os.path.join(directory, f"{split}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">iiii", 0x803, n, side, side) + images.numpy().tobytes())
        with open(os.path.join(directory, f"{split}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">ii", 0x801, n) + labels.to(torch.uint8).numpy().tobytes())


def read_idx(directory, split="train"):
    """A TensorDataset of an IDX split: images scaled to [0, 1], flat."""
    import os
    import struct
    with open(os.path.join(directory, f"{split}-images-idx3-ubyte"), "rb") as f:
        _, n, rows, cols = struct.unpack(">iiii", f.read(16))
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).float() / 255.0
    with open(os.path.join(directory, f"{split}-labels-idx1-ubyte"), "rb") as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return torch.utils.data.TensorDataset(x.view(n, rows * cols), y)


def make(kind, seed=3):
    torch.manual_seed(seed)  # the same initial weights in every process
    if kind == "cnn":
        return Cnn()
    if kind == "bncnn":
        return BnCnn()
    if kind == "mlp":
        return Mlp([144, 32, 16, 4])
    raise ValueError(kind)
