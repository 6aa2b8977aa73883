"""A wide & deep click model over the 26 categorical and 13 dense features:
  wide: one weight per category (a dim-1 table, summed over the fields);
  deep: each field's category as a `dim` vector (one shared table), the 26
        vectors and the dense features concatenated, then an MLP.
  logit = wide + deep. `bag(table, dim)` makes the embedding bags: plain
  torch.nn.EmbeddingBag(sparse=True) over hashed indices, or
  fulcrum.torch.EmbeddingBag over the ids themselves.
"""

import torch
import torch.nn as nn

FIELDS, INTS = 26, 13


class WideDeep(nn.Module):
    def __init__(self, bag, dim=8, hidden=(64, 32)):
        super().__init__()
        self.wide = bag("wide", 1)
        self.deep = bag("deep", dim)
        layers, width = [], FIELDS * dim + INTS
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)
        self.dim = dim

    def forward(self, ids, dense):
        """ids: int64 [batch, 26] (or indices into a local table); dense [batch, 13]."""
        b = ids.shape[0]
        wide = self.wide(ids)  # bags of 26: [batch, 1]
        deep = self.deep(ids.reshape(-1, 1)).reshape(b, FIELDS * self.dim)
        return (wide + self.mlp(torch.cat([deep, dense], dim=1))).squeeze(1)
