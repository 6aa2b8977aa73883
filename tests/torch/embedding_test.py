"""Embedding tables with PyTorch workers on a cluster of real processes:
two fulcrum.torch workers train the wide & deep click model
(examples/torch/ctr) on logs from tools/make_ctr_data and reach the test
AUC one plain PyTorch process with nn.EmbeddingBag(sparse=True) reaches on
the same data; a module whose table the job lacks, or whose dim differs,
is refused naming it."""

import os
import subprocess
import unittest

import harness

os.environ.setdefault("FULCRUM_LIB", harness.runfile("worker/capi/libfulcrum.so"))
import fulcrum  # noqa: E402
import fulcrum.torch  # noqa: E402
import torch  # noqa: E402

CTR = harness.runfile("examples/torch/ctr")


def ctr_job(name, workers=2, deep_staleness=None):
    with open(os.path.join(CTR, "ctr.yaml")) as f:
        text = f.read()
    text = (text.replace("name: ctr-wide-deep", f"name: {name}")
            .replace("workers: {min: 2, max: 2}", f"workers: {{min: {workers}, max: {workers}}}")
            .replace("capacity: 8000000", "capacity: 400000"))
    if deep_staleness is not None:
        text = text.replace("{name: deep, dim: 8,",
                            f"{{name: deep, dim: 8, staleness: {deep_staleness},")
    return text


class EmbeddingTablesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "ctr-data")
        subprocess.run([harness.runfile("tools/make_ctr_data"), "--out", cls.data,
                        "--train", "60000", "--test", "15000", "--largest_vocab", "50000"],
                       check=True, capture_output=True, timeout=300)
        with open(os.path.join(cls.data, "planted.txt")) as f:
            cls.planted = float(f.readline().split()[1])

    def setUp(self):
        self.cluster = harness.Cluster(shards=2)

    def tearDown(self):
        self.cluster.stop()

    def plain_auc(self):
        r = subprocess.run(["/usr/bin/python3", os.path.join(CTR, "plain_ctr.py"), "--data",
                            self.data, "--rows", "400000", "--batch", "512"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        return float(r.stdout.split("test auc ")[1].split()[0])

    def test_two_workers_reach_the_plain_process_auc(self):
        # The deep table bounds its staleness: pulls wait for the other
        # worker's pushes, empty steps included, to the end of the job.
        job_id = self.cluster.submit(ctr_job("ctr", deep_staleness=1))
        for r in range(2):
            self.cluster.worker(f"w{r}", os.path.join(CTR, "fulcrum_ctr.py"),
                                "--job", job_id, "--data", self.data)
        for r in range(2):
            p = self.cluster.procs[f"w{r}"]
            p.wait(timeout=600)
            self.assertEqual(p.returncode, 0, self.cluster.logs())
        self.cluster.wait_state(job_id, ["SUCCEEDED"], 60)
        log = self.cluster.log("w0") + self.cluster.log("w1")
        self.assertIn("test auc", log, log)
        got = float(log.split("test auc ")[1].split()[0])
        want = self.plain_auc()
        # The tables learned: far above chance, and as well as one process
        # with the same model, batch and optimizers (async updates of two
        # workers cost a little).
        self.assertGreater(got, 0.75, log)
        self.assertGreater(got, want - 0.02, f"fulcrum {got}, plain {want}\n{log}")
        self.assertLess(got, self.planted + 0.01)

    def test_a_missing_table_or_another_dim_is_refused(self):
        job_id = self.cluster.submit(ctr_job("refuse", workers=1))
        model = torch.nn.Sequential(fulcrum.torch.EmbeddingBag("deep", 4),
                                    torch.nn.Linear(4, 1))
        with self.assertRaises(fulcrum.FulcrumError) as bad:
            fulcrum.torch.Worker(model, coordinator=self.cluster.coordinator, job=job_id,
                                 join_timeout=60)
        self.assertIn("table 'deep' has dim 8 in the job, the module says 4",
                      str(bad.exception))


if __name__ == "__main__":
    harness.run_tests(globals())
