"""The PyTorch examples (examples/torch) as a user runs them: fulcrum
installed from the wheel tools/build_wheel.sh ships (no FULCRUM_LIB, no
source tree on the path), the shipped job spec, two workers; and the plain
single-process script. Fashion-MNIST-shaped IDX files stand in for the
dataset (28x28, 10 classes), so that the test runs in seconds."""

import os
import subprocess
import unittest
import zipfile

import torch

import harness
import models

WHEEL = "client/python/fulcrum-0.1.0-py3-none-linux_x86_64.whl"
EXAMPLES = "examples/torch"


class ExamplesTest(unittest.TestCase):
    def setUp(self):
        self.cluster = harness.Cluster(shards=2)
        self.data = os.path.join(self.cluster.dir, "fmnist")
        models.write_idx(self.data, train=512, test=200, side=28, classes=10)
        self.site = os.path.join(self.cluster.dir, "site")
        zipfile.ZipFile(harness.runfile(WHEEL)).extractall(self.site)
        os.chmod(os.path.join(self.site, "fulcrum", "libfulcrum.so"), 0o755)

    def tearDown(self):
        self.cluster.stop()

    def env(self):
        env = {k: v for k, v in os.environ.items() if k != "FULCRUM_LIB"}
        env["PYTHONPATH"] = self.site + ":" + harness.runfile(EXAMPLES)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def example(self, name, script, *args):
        return self.cluster._start(name, [harness.PYTHON, harness.runfile(
            os.path.join(EXAMPLES, script)), *args], env=self.env())

    def train_cnn(self, timeout, *extra):
        """The shipped CNN job with two example workers; its final status."""
        with open(harness.runfile(os.path.join(EXAMPLES, "fashion_mnist_cnn.yaml"))) as f:
            job_id = self.cluster.submit(f.read())
        for name in ("a", "b"):
            self.example(name, "fulcrum_train.py", "--coordinator", self.cluster.coordinator,
                         "--job", job_id, "--data", self.data, "--eval_every", "4",
                         *extra)
        for name in ("a", "b"):
            self.assertEqual(self.cluster.procs[name].wait(timeout=timeout), 0,
                             self.cluster.logs())
        return self.cluster.wait_state(job_id, ["SUCCEEDED"], 30)

    def test_the_cnn_example_trains_a_job_from_the_installed_wheel(self):
        status = self.train_cnn(180, "--threads", "1")
        self.assertEqual(len(status["workers"]), 2)
        logs = self.cluster.log("a") + self.cluster.log("b")
        self.assertIn("done at step", logs)
        # The templates are easy: the job's target (0.916) stops it early.
        self.assertGreaterEqual(float(status["progress"]["test_accuracy"]), 0.916,
                                (status, logs))
        self.assertLess(int(status["progress"]["step"]), 8 * 4, status)

    @unittest.skipUnless(torch.cuda.is_available(),
                         "no CUDA device (torch.cuda.is_available() is False): "
                         "the GPU path of fulcrum.torch is not run here")
    def test_the_cnn_example_on_a_gpu_reaches_the_target(self):
        # CUDA tensors: gradients staged through page-locked buffers, two
        # workers on one GPU.
        status = self.train_cnn(300, "--device", "cuda")
        self.assertGreaterEqual(float(status["progress"]["test_accuracy"]), 0.916,
                                status)

    def test_the_plain_example_trains_in_one_process(self):
        p = self.example("plain", "train.py", "--data", self.data, "--epochs", "2",
                         "--batch_size", "64")
        self.assertEqual(p.wait(timeout=120), 0, self.cluster.logs())
        log = self.cluster.log("plain")
        self.assertIn("epoch 1 step 16 ", log)
        acc = float(log.split("test accuracy ")[-1].split()[0])
        self.assertGreater(acc, 0.5, log)

    def test_the_wheel_loads_its_own_library(self):
        out = subprocess.run(
            [harness.PYTHON, "-c", "import fulcrum, fulcrum.torch, fulcrum._native; "
             "print(fulcrum.__file__, fulcrum.api_version(), fulcrum._native.API_VERSION)"],
            env=self.env(), capture_output=True, text=True, timeout=60, cwd="/")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith(self.site), out.stdout)
        _, library, package = out.stdout.split()
        self.assertEqual(library, package, "the library the package speaks")


if __name__ == "__main__":
    harness.run_tests(globals())
