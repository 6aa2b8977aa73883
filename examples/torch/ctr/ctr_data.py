"""Criteo display-advertising TSV (label, 13 integer features, 26 hashed
categorical features; tab-separated, empty = missing) as numpy arrays.

  labels: float32 [n]
  dense:  float32 [n, 13], log(1 + max(x, 0)), 0 when missing
  ids:    int64 [n, 26], field f's category c as the uint64 id
          (f + 1) << 32 | c (bit pattern in an int64); a missing category is
          its field's id (f + 1) << 32.
"""

import numpy as np

FIELDS, INTS = 26, 13


def _arrays(labels, dense, ids):
    labels = np.asarray(labels, dtype=np.float32)
    dense = np.log1p(np.maximum(np.asarray(dense, dtype=np.float64), 0)).astype(np.float32)
    cats = np.asarray(ids, dtype=np.int64) & 0xFFFFFFFF
    fields = (np.arange(1, FIELDS + 1, dtype=np.int64) << 32)[None, :]
    return labels, dense.reshape(-1, INTS), (cats | fields).reshape(-1, FIELDS)


def read_tsv(path, limit=0, block=65536):
    """Reads `path` (the first `limit` lines; 0: all), `block` lines at a
    time into numpy (Python lists only for one block: memory stays ~the
    arrays')."""
    parts, labels, dense, ids = [], [], [], []
    with open(path) as f:
        for n, line in enumerate(f):
            if limit and n >= limit:
                break
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 1 + INTS + FIELDS:
                raise ValueError(f"{path}:{n + 1}: {len(cols)} columns, want {1 + INTS + FIELDS}")
            labels.append(float(cols[0]))
            dense.append([float(c) if c else 0.0 for c in cols[1:1 + INTS]])
            ids.append([int(c, 16) if c else 0 for c in cols[1 + INTS:]])
            if len(labels) == block:
                parts.append(_arrays(labels, dense, ids))
                labels, dense, ids = [], [], []
    if labels or not parts:
        parts.append(_arrays(labels, dense, ids))
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))


def auc(score, label):
    """Area under the ROC curve (ties averaged)."""
    score = np.asarray(score, dtype=np.float64)
    label = np.asarray(label)
    order = np.argsort(score, kind="mergesort")
    s = score[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j + 2) / 2.0
        i = j + 1
    pos = float((label == 1).sum())
    neg = len(label) - pos
    return (ranks[label == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg)


def logloss(prob, label):
    p = np.clip(np.asarray(prob, dtype=np.float64), 1e-7, 1 - 1e-7)
    return float(-np.mean(label * np.log(p) + (1 - label) * np.log(1 - p)))
