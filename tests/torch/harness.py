"""A Fulcrum cluster of real processes on loopback for the PyTorch tests:
a coordinator and shards from the Bazel runfiles, PyTorch workers as
subprocesses. Every wait is bounded; every process is killed at the end."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "fulcrum")
PYTHON = "/usr/bin/python3"


def runfile(path):
    return os.path.join(RUNFILES, path)


def worker_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = runfile("client/python") + ":" + os.path.dirname(__file__)
    env["FULCRUM_LIB"] = runfile("worker/capi/libfulcrum.so")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Cluster:
    def __init__(self, shards=1, lease_ms=2000):
        self.dir = tempfile.mkdtemp(prefix="cluster_", dir=os.environ.get("TEST_TMPDIR"))
        self.procs = {}
        port_file = os.path.join(self.dir, "coordinator.port")
        self._start("coordinator", [runfile("server/coordinator/fulcrum-coordinator"),
                                    "--listen=127.0.0.1:0", f"--port_file={port_file}",
                                    "--heartbeat_ms=200", f"--lease_ms={lease_ms}",
                                    "--start_grace_ms=300", f"--checkpoint_root={self.dir}",
                                    # the tests' IDX files are in their temp dirs
                                    "--data_root=/"])
        self._wait(lambda: os.path.exists(port_file) and open(port_file).read().strip(),
                   10, "the coordinator's port")
        self.coordinator = "127.0.0.1:" + open(port_file).read().strip()
        for i in range(shards):
            self._start(f"shard-{i}", [runfile("server/ps/fulcrum-server"),
                                       "--listen=127.0.0.1:0",
                                       f"--coordinator={self.coordinator}",
                                       f"--checkpoint_root={self.dir}"])
        self._wait(lambda: self.members("shard") >= shards, 20, "the shards to register")

    def _start(self, name, argv, env=None):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        return self.procs[name]

    @staticmethod
    def _wait(cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"timed out waiting for {what}")

    def ctl(self, *args, check=True):
        r = subprocess.run([runfile("client/fulcrumctl"), f"--coordinator={self.coordinator}",
                            *args], capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError(f"fulcrumctl {' '.join(args)}: {r.stderr}")
        return r.stdout

    def members(self, role):
        out = self.ctl("members", check=False)
        return sum(1 for line in out.splitlines()[1:] if f" {role} " in line)

    def submit(self, yaml_text):
        path = os.path.join(self.dir, "job.yaml")
        with open(path, "w") as f:
            f.write(yaml_text)
        return self.ctl("submit", path).strip()

    def status(self, job):
        return json.loads(self.ctl("status", job, "--json"))

    def wait_state(self, job, states, timeout):
        return self._wait(lambda: self.status(job)["state"] in states and self.status(job),
                          timeout, f"{job} to reach {states}")

    def worker(self, name, script, *args):
        return self._start(name, [PYTHON, os.path.join(os.path.dirname(__file__), script),
                                  "--coordinator", self.coordinator, *args], env=worker_env())

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log")) as f:
            return f.read()

    def logs(self):
        return "\n".join(f"== {n}\n{self.log(n)[-3000:]}" for n in self.procs)

    def kill(self, name, sig=signal.SIGKILL):
        p = self.procs[name]
        if p.poll() is None:
            os.killpg(p.pid, sig)
            p.wait(timeout=10)

    def stop(self):
        for name in list(self.procs):
            try:
                self.kill(name, signal.SIGTERM)
            except Exception:
                self.kill(name)


def run_tests(module_globals):
    """Runs the module's unittest cases; writes JUnit XML for Bazel (each
    case counted) and exits non-zero on a failure; `--test_filter=S` runs the
    cases whose id contains S. Skips every case, saying
    why, when PyTorch is not importable."""
    import unittest
    import xml.sax.saxutils as sx
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[module_globals["__name__"]])
    only = os.environ.get("TESTBRIDGE_TEST_ONLY")  # bazel test --test_filter=NAME
    if only:
        def cases(s):
            for t in s:
                yield from (cases(t) if isinstance(t, unittest.TestSuite) else [t])
        suite = unittest.TestSuite(t for t in cases(suite) if only in t.id())
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    out = os.environ.get("XML_OUTPUT_FILE")
    if out:
        cases = []
        for test, err in result.failures + result.errors:
            cases.append(f'<testcase name="{sx.escape(test.id())}"><failure>{sx.escape(err)}</failure></testcase>')
        for test, why in result.skipped:
            cases.append(f'<testcase name="{sx.escape(test.id())}"><skipped message="{sx.quoteattr(why)[1:-1]}"/></testcase>')
        bad = len(result.failures) + len(result.errors)
        with open(out, "w") as f:
            f.write(f'<?xml version="1.0"?>\n<testsuites><testsuite name="{module_globals["__name__"]}" '
                    f'tests="{result.testsRun}" failures="{bad}" errors="0" skipped="{len(result.skipped)}">'
                    + "".join(cases) + "</testsuite></testsuites>\n")
    sys.exit(0 if result.wasSuccessful() else 1)
