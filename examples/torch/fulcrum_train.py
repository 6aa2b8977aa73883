"""Fashion-MNIST trained by a Fulcrum job: train.py with the optimizer and
the epoch loop handed to Fulcrum. Start one per worker (they may come and go
while the job runs); the job spec (fashion_mnist_cnn.yaml) holds what the
plain script's flags held: the optimizer, its schedule, the batch size per
worker and the epochs.

    /usr/bin/python3 examples/torch/fulcrum_train.py --coordinator HOST:PORT --job JOB
"""

import argparse
import time

import torch
import torch.nn.functional as F

import fmnist
import fulcrum.torch

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
p.add_argument("--data", default=fmnist.DATA)
p.add_argument("--coordinator", required=True)
p.add_argument("--job", required=True)
p.add_argument("--eval_every", type=int, default=400, help="steps between evaluations")
p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where the model trains")
p.add_argument("--tls_dir", default="", help="mutual TLS: ca.crt, tls.crt, tls.key (tools/make_certs.sh)")
p.add_argument("--metrics_address", default="127.0.0.1", help="of /metrics, /healthz, /readyz")
p.add_argument("--metrics_port", type=int, default=0, help="0: any free port; -1: off")
args = p.parse_args()

if args.threads:
    torch.set_num_threads(args.threads)
torch.manual_seed(1)  # the job's first worker uploads its initial values
model = fmnist.make(args.model).to(args.device)
train = fmnist.load(args.data, "train", args.model)
test = fmnist.load(args.data, "t10k", args.model)
tls = {"ca": f"{args.tls_dir}/ca.crt", "cert": f"{args.tls_dir}/tls.crt",
       "key": f"{args.tls_dir}/tls.key"} if args.tls_dir else None
w = fulcrum.torch.Worker(model, coordinator=args.coordinator, job=args.job, tls=tls,
                         metrics_address=args.metrics_address,
                         metrics_port=args.metrics_port)
print(f"joined {args.job} as rank {w.rank} of {w.world_size} at step {w.step_num}",
      flush=True)

start, evaluating = time.monotonic(), 0.0
with w:  # leaves the job at the end (or with the error that ended it)
    for x, y in w.data(train):
        x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        w.step()
        if w.rank == 0 and w.step_num % args.eval_every == 0:
            t = time.monotonic()
            acc = fmnist.accuracy(model, test)
            evaluating += time.monotonic() - t
            w.report(loss=loss.item(), accuracy=acc)
            print(f"step {w.step_num} loss {loss.item():.4f} test accuracy {acc:.4f} "
                  f"({time.monotonic() - start:.1f} s)", flush=True)
    elapsed = time.monotonic() - start
    if w.rank == 0:  # the parameters the job ended with
        acc = fmnist.accuracy(model, test)
        w.report(accuracy=acc)
        print(f"done at step {w.step_num}: test accuracy {acc:.4f}", flush=True)
    # For bench/: this worker's time in the loop, and the part spent evaluating.
    print(f"summary rank {w.rank} steps {w.step_num} elapsed_s {elapsed:.2f} "
          f"eval_s {evaluating:.2f}", flush=True)
