"""PyTorch workers (fulcrum.torch) on a cluster of real processes: the same
parameters as one process with the whole batch (on-shard optimizer and
gradient averaging), elasticity with a SIGKILL, a C++ and a PyTorch worker
in one job, and bad input."""

import os
import subprocess
import unittest

import torch
import torch.nn.functional as F

import harness
import models

# This process loads exported models with the library the workers use.
os.environ.setdefault("FULCRUM_LIB", harness.runfile("worker/capi/libfulcrum.so"))
import fulcrum  # noqa: E402
import fulcrum.torch  # noqa: E402

JOB = """name: {name}
model: {{type: external}}
optimizer: {optimizer}
batch_size: {batch}
epochs: {epochs}
max_steps: {max_steps}
workers: {{min: {min}, max: {max}}}
shards: {shards}
seed: 11
dataset: {{sharding: {sharding}}}
target_accuracy: {target}
consistency: {consistency}
"""


def job(name, optimizer="{type: momentum, lr: 0.05, momentum: 0.9}", batch=8,
        epochs=4, max_steps=0, workers=(2, 2), shards=2, sharding="static",
        target=0.0, consistency="{mode: sync}"):
    return JOB.format(name=name, optimizer=optimizer, batch=batch, epochs=epochs,
                      max_steps=max_steps, min=workers[0], max=workers[1],
                      shards=shards, sharding=sharding, target=target,
                      consistency=consistency)


def reference(steps, batch, workers, seed=11, lr=0.05, momentum=0.9,
              kind="cnn"):
    """One plain process: the global batch of every step, torch.optim.SGD."""
    model = models.make(kind)
    data = models.synthetic()
    x_all, y_all = data.tensors
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    n, big = len(data), batch * workers
    per_epoch = -(-n // big)
    for step in range(steps):
        epoch, k = divmod(step, per_epoch)
        g = torch.Generator().manual_seed(seed * 1000003 + epoch)
        idx = torch.randperm(n, generator=g)[k * big:min((k + 1) * big, n)]
        opt.zero_grad()
        F.cross_entropy(model(x_all[idx]), y_all[idx]).backward()
        opt.step()
    return model.state_dict()


def max_relative_difference(a, b):
    worst = 0.0
    for k in b:
        d = (a[k] - b[k]).abs() / b[k].abs().clamp(min=1e-3)
        worst = max(worst, d.max().item())
    return worst


class PyTorchWorkersTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(shards=2)

    def tearDown(self):
        self.cluster.stop()

    def train(self, job_id, count, *extra, out=True):
        paths = []
        for r in range(count):
            path = os.path.join(self.cluster.dir, f"w{r}.pt")
            self.cluster.worker(f"w{r}", "train_worker.py", "--job", job_id,
                                *(("--out", path) if out else ()), *extra)
            paths.append(path)
        return paths

    def finish(self, names, timeout=120):
        for n in names:
            p = self.cluster.procs[n]
            p.wait(timeout=timeout)
            self.assertEqual(p.returncode, 0, self.cluster.logs())

    def check_equivalent(self, spec, *extra, export=True):
        job_id = self.cluster.submit(spec)
        paths = self.train(job_id, 2, *extra)
        self.finish(["w0", "w1"])
        status = self.cluster.wait_state(job_id, ["SUCCEEDED"], 30)
        self.assertEqual(int(status["progress"]["step"]), 50)
        want = reference(50, 8, 2)
        for path in paths:
            got = torch.load(path)
            diff = max_relative_difference(got, want)
            self.assertLessEqual(diff, 1e-4, path)
        moved = max_relative_difference(models.make("cnn").state_dict(), want)
        self.assertGreater(moved, 1e-2, "training moved the parameters")
        exported = os.path.join(self.cluster.dir, "model.bin")
        if not export:  # the shards hold gradients: export says so
            r = subprocess.run([harness.runfile("client/fulcrumctl"),
                                f"--coordinator={self.cluster.coordinator}", "export",
                                job_id, "--out", exported],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("optimizer.type average", r.stderr)
            self.assertFalse(os.path.exists(exported))
            return
        # fulcrumctl export writes the shards' final values: exactly the
        # workers' model, loadable into a fresh one.
        self.cluster.ctl("export", job_id, "--out", exported)
        fresh = models.make("cnn")
        self.assertGreater(fulcrum.torch.load_exported(fresh, exported), 0)
        got = torch.load(paths[0])
        for k, v in fresh.state_dict().items():
            self.assertTrue(torch.equal(v, got[k]), k)
        with self.assertRaises(fulcrum.FulcrumError) as bad:
            fulcrum.torch.load_exported(models.make("mlp"), exported)
        self.assertIn("floats; the model has", str(bad.exception))

    def test_two_workers_equal_one_process_with_the_global_batch(self):
        self.check_equivalent(job("equivalence", max_steps=50))

    def test_gradient_averaging_with_the_workers_own_optimizer(self):
        self.check_equivalent(job("averaging", optimizer="{type: average}",
                                  max_steps=50), "--averaging", export=False)

    def test_ssp_and_async_jobs_train_to_the_target(self):
        # The consistency mode comes from the job spec, as for fulcrum-worker;
        # one worker is slowed down, so reads really are bounded by clocks.
        for mode in ("{mode: ssp, staleness: 2}", "{mode: async}"):
            with self.subTest(mode=mode):
                job_id = self.cluster.submit(job(
                    "modes", epochs=12, sharding="chunks", target=0.95,
                    consistency=mode))
                self.cluster.worker("fast", "train_worker.py", "--job", job_id,
                                    "--model", "mlp")
                self.cluster.worker("slow", "train_worker.py", "--job", job_id,
                                    "--model", "mlp", "--step_delay", "0.01")
                self.finish(["fast", "slow"])
                status = self.cluster.wait_state(job_id, ["SUCCEEDED"], 30)
                self.assertGreaterEqual(float(status["progress"]["test_accuracy"]),
                                        0.95, status)

    def test_batchnorm_statistics_are_the_workers_average(self):
        # Buffers go to the shards as values and come back averaged: both
        # replicas hold the same statistics, and those of the input's
        # BatchNorm (which see only the data) equal one process's with the
        # global batch, the last short batch of an epoch included.
        job_id = self.cluster.submit(job("buffers", max_steps=50))
        paths = self.train(job_id, 2, "--model", "bncnn", "--report_every", "1000")
        self.finish(["w0", "w1"])
        a, b = torch.load(paths[0]), torch.load(paths[1])
        buffers = [k for k in a if "running" in k]
        self.assertEqual(len(buffers), 4, list(a))
        for k in buffers:
            self.assertTrue(torch.equal(a[k], b[k]), k)
        init = models.make("bncnn").state_dict()
        self.assertGreater((a["bn1.running_mean"] - init["bn1.running_mean"])
                           .abs().max().item(), 1e-2, "the statistics moved")
        want = reference(50, 8, 2, kind="bncnn")["bn0.running_mean"]
        self.assertGreater(want.abs().max().item(), 1e-3)  # ~8e-3
        diff = (a["bn0.running_mean"] - want).abs().max().item()
        self.assertLessEqual(diff, 1e-5)

    def test_a_killed_worker_is_replaced_and_every_sample_trained_once(self):
        self.check_elastic()

    def test_the_same_through_a_dataloader_that_prefetches(self):
        # w.sampler() as a DataLoader's batch_sampler, two loader processes
        # fetching ahead: a chunk counts as done only once its last batch's
        # step was applied.
        self.check_elastic("--loader", "2")

    def test_gradient_averaging_survives_a_kill_and_a_join(self):
        # The shards hold no weights in this mode: every new generation
        # starts from rank 0's current values, joiners included.
        self.check_elastic("--averaging", optimizer="{type: average}")

    def test_an_ssp_job_with_a_replaced_worker_ends_and_exports(self):
        # Issue 38, items 6 and 7: Adam, ssp, three workers, one SIGKILLed
        # mid-epoch and replaced. Its partial last step left the partitions
        # at different versions and export refused the SUCCEEDED job; the
        # members that wound down on the end got no "finished" event.
        job_id = self.cluster.submit(job(
            "ssp-replaced", optimizer="{type: adam, lr: 0.005}", epochs=8,
            workers=(3, 3), sharding="chunks",
            consistency="{mode: ssp, staleness: 2}"))
        extra = ("--model", "mlp", "--step_delay", "0.03")
        self.train(job_id, 3, *extra, out=False)
        self.cluster._wait(lambda: (lambda s: len(s.get("workers", [])) == 3 and int(
            s.get("progress", {}).get("step", 0)) >= 20)(self.cluster.status(job_id)),
                           90, "three workers in and step 20")
        self.cluster.kill("w1")
        self.cluster.worker("w3", "train_worker.py", "--job", job_id, *extra)
        status = self.cluster.wait_state(job_id, ["SUCCEEDED", "FAILED"], 180)
        self.assertEqual(status["state"], "SUCCEEDED", self.cluster.logs())
        self.finish(["w0", "w2", "w3"])
        # The ledger reaches the coordinator with the shards' heartbeats.
        whole = lambda s: len(s["epochs"]) == 8 and all(
            int(e.get("trained", 0)) == int(e["total"]) for e in s["epochs"])
        try:
            self.cluster._wait(lambda: whole(self.cluster.status(job_id)), 10,
                               "the ledger")
        except TimeoutError:
            pass
        for e in self.cluster.status(job_id)["epochs"]:
            self.assertEqual(int(e.get("trained", 0)), int(e["total"]),
                             self.cluster.status(job_id)["epochs"])
        events = [(e.get("kind"), e.get("member_id")) for e in status["events"]]
        self.assertIn("lost", [k for k, _ in events], events)
        status = self.cluster.status(job_id)  # after the members wound down
        finished = {m for k, m in ((e.get("kind"), e.get("member_id"))
                                   for e in status["events"]) if k == "finished"}
        self.assertEqual(finished, set(status["workers"]), status["events"])
        exported = os.path.join(self.cluster.dir, "ssp.bin")
        self.cluster.ctl("export", job_id, "--out", exported)
        fresh = models.make("mlp")
        self.assertGreater(fulcrum.torch.load_exported(fresh, exported), 0)
        moved = max_relative_difference(models.make("mlp").state_dict(),
                                        fresh.state_dict())
        self.assertGreater(moved, 1e-2, "the export holds the trained model")

    def check_metrics(self, name, job_id):
        """A PyTorch worker serves the worker's Prometheus metrics."""
        import re
        import urllib.request
        port = int(re.search(r"metrics port (\d+)", self.cluster.log(name)).group(1))
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(base + "/readyz", timeout=10) as r:
            self.assertEqual(r.status, 200)
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            text = r.read().decode()
        values = {}
        for line in text.splitlines():
            m = re.match(r'(fulcrum_worker_\w+)\{job_id="' + job_id + r'"\} (\S+)', line)
            if m:
                values[m.group(1)] = float(m.group(2))
        self.assertGreater(values.get("fulcrum_worker_steps_total", 0), 0, text)
        self.assertGreater(values.get("fulcrum_worker_samples_total", 0), 0, text)
        self.assertGreater(values.get("fulcrum_worker_push_bytes_total", 0), 0, text)
        self.assertIn("fulcrum_worker_comm_wait_seconds_count", text)

    def check_elastic(self, *extra, optimizer="{type: momentum, lr: 0.05, momentum: 0.9}"):
        # The MLP: it learns the synthetic rule to the target in a few epochs.
        job_id = self.cluster.submit(job("elastic", epochs=12, workers=(1, 2),
                                         sharding="chunks", target=0.95,
                                         optimizer=optimizer))
        extra = ("--model", "mlp") + extra
        self.train(job_id, 2, "--step_delay", "0.03", *extra, out=False)
        # Both members (a slow start joins a later generation), then step 20.
        self.cluster._wait(lambda: (lambda s: len(s.get("workers", [])) == 2 and int(
            s.get("progress", {}).get("step", 0)) >= 20)(self.cluster.status(job_id)),
                           90, "both workers in and step 20")
        self.check_metrics("w0", job_id)
        self.cluster.kill("w1")  # SIGKILL mid-epoch
        self.cluster.worker("w2", "train_worker.py", "--job", job_id,
                            "--step_delay", "0.03", *extra)
        status = self.cluster.wait_state(job_id, ["SUCCEEDED", "FAILED"], 180)
        self.assertEqual(status["state"], "SUCCEEDED", self.cluster.logs())
        self.assertGreaterEqual(float(status["progress"]["test_accuracy"]), 0.95,
                                "the target stopped it")
        kinds = [(e.get("kind"), e.get("member_id")) for e in status["events"]]
        self.assertIn("lost", [k for k, _ in kinds], kinds)
        epochs = status["epochs"]
        self.assertGreaterEqual(len(epochs), 3)
        # The target stops the job mid-epoch; leases run ahead into the next
        # epoch, so the last two may be partial. Every one before is whole,
        # the kill's included, and none has a sample twice.
        for e in epochs[:-2]:
            self.assertEqual(int(e["trained"]), int(e["total"]), epochs)
        for e in epochs[-2:]:
            self.assertLessEqual(int(e.get("trained", 0)), int(e["total"]), epochs)
        self.assertEqual(self.cluster.procs["w0"].wait(timeout=30), 0,
                         "the survivor trained on without a restart")

    def test_a_cpp_and_a_pytorch_worker_train_one_job(self):
        data = os.path.join(self.cluster.dir, "idx")
        models.write_idx(data)
        job_id = self.cluster.submit(
            "name: mixed\nmodel: {type: mlp, layers: [144, 32, 16, 4]}\n"
            f"dataset: {{dir: {data}}}\n"
            "optimizer: {type: momentum, lr: 0.05, momentum: 0.9}\n"
            "batch_size: 16\nepochs: 4\nworkers: {min: 2, max: 2}\nshards: 2\n"
            "eval_every_steps: 20\n")
        self.cluster._start("cpp", [harness.runfile("worker/fulcrum-worker"),
                                    f"--coordinator={self.cluster.coordinator}",
                                    f"--data_root={self.cluster.dir}",
                                    "--max_jobs=1", "--metrics_port=-1"])
        self.cluster.worker("torch", "train_worker.py", "--job", job_id,
                            "--model", "mlp", "--idx", data)
        status = self.cluster.wait_state(job_id, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual(status["state"], "SUCCEEDED", self.cluster.logs())
        self.assertEqual(len(status["workers"]), 2)
        # The shards' ledger reaches the coordinator with their next
        # heartbeat after the end.
        status = self.cluster._wait(
            lambda: (lambda s: all(int(e.get("trained", 0)) == int(e["total"])
                                   for e in s["epochs"]) and s)(
                self.cluster.status(job_id)), 10, "the final ledger")
        self.assertEqual(len(status["epochs"]), 4)
        self.assertGreater(float(status["progress"].get("test_accuracy", 0)), 0.5,
                           (status, self.cluster.logs()))
        self.finish(["cpp", "torch"])

    def test_a_mismatched_model_is_refused_and_the_job_unaffected(self):
        job_id = self.cluster.submit(job("mismatch", epochs=3, workers=(1, 2),
                                         sharding="chunks"))
        self.train(job_id, 1, "--step_delay", "0.02", out=False)
        self.cluster._wait(lambda: self.cluster.status(job_id)["state"] == "RUNNING",
                           60, "the job to run")
        self.cluster.worker("other", "train_worker.py", "--job", job_id,
                            "--model", "mlp")
        self.cluster.procs["other"].wait(timeout=60)
        self.assertNotEqual(self.cluster.procs["other"].returncode, 0)
        log = self.cluster.log("other")
        self.assertIn("code 9", log)
        self.assertIn("the model does not match job", log)
        self.assertIn("conv1.weight", log)
        self.finish(["w0"])
        self.assertEqual(self.cluster.status(job_id)["state"], "SUCCEEDED")

    def test_a_nan_gradient_fails_its_worker_and_changes_nothing(self):
        # min 2: both are members before the NaN (with min 1 the job failed
        # when the healthy worker was slower to start than 5 steps).
        job_id = self.cluster.submit(job("nan", epochs=4, workers=(2, 2),
                                         sharding="chunks"))
        self.train(job_id, 1, "--nan_after", "5", out=False)
        self.cluster.worker("healthy", "train_worker.py", "--job", job_id)
        self.cluster.procs["w0"].wait(timeout=60)
        self.assertEqual(self.cluster.procs["w0"].returncode, 3, self.cluster.log("w0"))
        self.assertIn("is not finite", self.cluster.log("w0"))
        self.finish(["healthy"])
        status = self.cluster.wait_state(job_id, ["SUCCEEDED"], 60)
        self.assertIn("failed", [e.get("kind") for e in status["events"]])
        # A worker started for the ended job is refused at once, saying why.
        late = self.cluster.worker("late", "train_worker.py", "--job", job_id)
        late.wait(timeout=60)
        self.assertNotEqual(late.returncode, 0)
        self.assertIn("already ended (SUCCEEDED)", self.cluster.log("late"))

    def test_a_finite_gradient_that_would_overflow_the_model_is_not_applied(self):
        # 3e38 x 8 samples overflows float on the shard: the step's update is
        # not applied, the worker whose push held the largest element fails,
        # the other redoes the step; the model stays finite.
        job_id = self.cluster.submit(job("huge", epochs=3, workers=(2, 2),
                                         sharding="chunks"))
        self.train(job_id, 1, "--huge_after", "5", out=False)
        path = os.path.join(self.cluster.dir, "healthy.pt")
        self.cluster.worker("healthy", "train_worker.py", "--job", job_id, "--out", path)
        self.cluster.procs["w0"].wait(timeout=60)
        self.assertEqual(self.cluster.procs["w0"].returncode, 3, self.cluster.logs())
        self.assertIn("would have made values non-finite", self.cluster.log("w0"))
        self.finish(["healthy"])
        status = self.cluster.wait_state(job_id, ["SUCCEEDED"], 60)
        kinds = [e.get("kind") for e in status["events"]]
        self.assertIn("nonfinite", kinds, status["events"])
        self.assertIn("failed", kinds)
        for name, value in torch.load(path).items():
            self.assertTrue(torch.isfinite(value).all().item(), name)
        # fail_job: the first refused update fails the job, saying why.
        failing = self.cluster.submit(job(
            "huge2", epochs=3, workers=(2, 2), sharding="chunks",
            optimizer="{type: momentum, lr: 0.05, momentum: 0.9, "
                      "on_nonfinite: fail_job}"))
        self.cluster.worker("bad2", "train_worker.py", "--job", failing,
                            "--huge_after", "3")
        self.cluster.worker("healthy2", "train_worker.py", "--job", failing)
        status = self.cluster.wait_state(failing, ["FAILED", "SUCCEEDED"], 90)
        self.assertEqual(status["state"], "FAILED", self.cluster.logs())
        self.assertIn("non-finite", status["message"])
        self.assertIn("fail_job", status["message"])


class CallsAfterFinishTest(unittest.TestCase):
    def test_a_finished_worker_refuses_calls(self):
        w = fulcrum.torch.Worker.__new__(fulcrum.torch.Worker)
        w._native = None
        with self.assertRaises(fulcrum.FulcrumError) as e:
            w.step()
        self.assertEqual(e.exception.code, 9)


if __name__ == "__main__":
    harness.run_tests(globals())
