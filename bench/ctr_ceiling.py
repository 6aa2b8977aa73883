#!/usr/bin/python3
"""What part of the planted click model a learner could hope to recover
(docs/benchmarks.md, "the C++ workers"): draws fresh lines from
tools/make_ctr_data's generator (same seed, vocabularies and parameters as
its defaults) and prints the AUC of the planted logit, of the planted logit
without its field-pair terms (what a model without interactions can reach
at best), and with the per-category terms of the categories expected fewer
than c times in --train lines zeroed (what the Zipf tail costs).

    bench/ctr_ceiling.py [--lines 200000] [--train 3000000]
"""
import argparse

import numpy as np

from planted import generator as m


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=200000)
    p.add_argument("--train", type=int, default=3000000)
    p.add_argument("--largest_vocab", type=int, default=2000000)
    a = p.parse_args()
    zipf, signal_ranks, missing, bias = 1.1, 1000.0, 0.02, -1.5
    seed = np.uint64(1)
    vocab = m.vocabularies(a.largest_vocab)
    rng = np.random.default_rng(12345)
    n, F, K = a.lines, m.FIELDS, m.K
    cats = np.empty((n, F), dtype=np.uint64)
    decay = np.empty((n, F))
    expected = np.empty((n, F))  # occurrences of each line's category in --train lines
    for f in range(F):
        rank = m.zipf_ranks(rng, n, vocab[f], zipf)
        decay[:, f] = 1.0 / np.sqrt(1.0 + rank / signal_ranks)
        v, e = vocab[f], 1.0 - zipf
        cdf = lambda x: (np.power(x + 1.0, e) - 1.0) / (v ** e - 1.0)
        r = rank.astype(np.float64)
        expected[:, f] = (cdf(r + 1) - cdf(r)) * a.train
        with np.errstate(over="ignore"):
            cats[:, f] = m.mix(rank.astype(np.uint64) * np.uint64(F) + np.uint64(f) + seed) \
                & np.uint64(0xFFFFFFFF)
    miss = rng.random((n, F)) < missing
    cats[miss] = 0

    def terms(keep):
        wide, pairs = np.zeros(n), np.zeros(n)
        with np.errstate(over="ignore"):
            for f in range(F):
                sigma = 1.2 if f < 8 else 0.4
                w = sigma * decay[:, f] * m.normal(
                    cats[:, f] * np.uint64(131) + np.uint64(f * 7919) + seed)
                w[miss[:, f] | ~keep[:, f]] = 0.0
                wide += w
            for (f, g) in m.PAIRS:
                dot = np.zeros(n)
                for k in range(K):
                    uf = m.normal(cats[:, f] * np.uint64(977) + np.uint64(1000 * f + k) + seed)
                    ug = m.normal(cats[:, g] * np.uint64(977) + np.uint64(1000 * g + k) + seed)
                    dot += uf * ug
                dot *= 0.5 / np.sqrt(K) * decay[:, f] * decay[:, g]
                dot[miss[:, f] | miss[:, g] | ~keep[:, f] | ~keep[:, g]] = 0.0
                pairs += dot
        return wide, pairs

    wide, pairs = terms(np.ones((n, F), dtype=bool))
    ints = np.floor(rng.lognormal(mean=1.0, sigma=1.2, size=(n, m.INTS))).astype(np.int64)
    dense = np.log1p(ints) @ (m.normal(np.arange(m.INTS, dtype=np.uint64) + seed + np.uint64(77)) * 0.3)
    logit = bias + wide + pairs + dense
    label = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    print("planted AUC %.4f" % m.auc(logit, label))
    print("without the field-pair terms %.4f" % m.auc(bias + wide + dense, label))
    for c in (3, 10, 30):
        keep = expected >= c
        w, pr = terms(keep)
        print("categories expected < %d times in %d lines zeroed (%.0f%% of occurrences kept): %.4f"
              % (c, a.train, 100 * keep.mean(), m.auc(bias + w + pr + dense, label)))


if __name__ == "__main__":
    main()
