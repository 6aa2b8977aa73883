"""One PyTorch worker of a test job: trains `--model` on synthetic data with
fulcrum.torch until the job ends, then saves its parameters."""

import argparse
import math

import torch
import torch.nn.functional as F

import fulcrum
import fulcrum.torch
import models

p = argparse.ArgumentParser()
p.add_argument("--coordinator", required=True)
p.add_argument("--job", required=True)
p.add_argument("--model", default="cnn")
p.add_argument("--samples", type=int, default=600)
p.add_argument("--idx", default="", help="train on these IDX files")
p.add_argument("--out", default="")
p.add_argument("--averaging", action="store_true", help="the worker's own SGD")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--nan_after", type=int, default=-1,
               help="push a NaN gradient at this worker's Nth step (from its join)")
p.add_argument("--huge_after", type=int, default=-1,
               help="at this worker's Nth step push a finite gradient of 3e38 "
                    "everywhere (its weighted sum overflows on the shard)")
p.add_argument("--report_every", type=int, default=5)
p.add_argument("--step_delay", type=float, default=0.0)
p.add_argument("--loader", type=int, default=-1,
               help=">= 0: w.loader(), a DataLoader with this many processes")
args = p.parse_args()

model = models.make(args.model)
huge = [False]
if args.huge_after >= 0:
    # Registered before the Worker's own hooks, so theirs see this gradient.
    for prm in model.parameters():
        prm.register_hook(lambda g: torch.full_like(g, 3e38) if huge[0] else g)
data = models.read_idx(args.idx) if args.idx else models.synthetic(args.samples)
opt = (torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
       if args.averaging else None)
w = fulcrum.torch.Worker(model, coordinator=args.coordinator, job=args.job,
                         optimizer=opt, join_timeout=120, step_timeout=60)
print(f"joined rank {w.rank} of {w.world_size} at step {w.step_num} "
      f"(metrics port {w.metrics_port})", flush=True)
x_all, y_all = data.tensors
try:
    batches = (w.data(data) if args.loader < 0
               else w.loader(data, num_workers=args.loader))
    for trained, (x, y) in enumerate(batches):
        loss = F.cross_entropy(model(x), y)
        if trained == args.nan_after:
            loss = loss * math.nan  # a diverged worker's gradient
        huge[0] = trained == args.huge_after
        loss.backward()
        w.step()
        if args.step_delay:
            import time
            time.sleep(args.step_delay)
        if w.rank == 0 and w.step_num % args.report_every == 0:
            model.eval()  # BatchNorm: the running statistics, not updated
            with torch.no_grad():
                acc = (model(x_all).argmax(1) == y_all).float().mean().item()
            model.train()
            w.report(loss=loss.item(), accuracy=acc)
except fulcrum.FulcrumError as e:
    print(f"failed: code {e.code}: {e.message}", flush=True)
    w.finish(error=e.message)
    raise SystemExit(3)
if args.out:
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, args.out)
print(f"done at step {w.step_num}", flush=True)
w.finish()
