"""fulcrum.torch: a PyTorch script as a Fulcrum worker.

    import fulcrum.torch
    w = fulcrum.torch.Worker(model, coordinator="127.0.0.1:7070", job="job-3")
    for x, y in w.data(train_set):          # this worker's batches, leased
        loss = F.cross_entropy(model(x), y)
        loss.backward()                      # gradients leave as they appear
        w.step()                             # the new parameters are in
    w.finish()

The model's parameters are declared to the job (the first worker's
declaration is the job's model) and live on the shards: the job's optimizer
runs there and a worker holds no optimizer state. With `optimizer:
{type: average}` in the job spec the shards return the averaged gradient
instead and the worker's own `torch.optim` optimizer (Worker(optimizer=...))
applies it. Floating-point buffers (BatchNorm's running_mean and
running_var) are declared as buffers: each step pushes their values and
every worker takes back the shards' sample-weighted average, so replicas,
joiners and checkpoints hold the same statistics. docs/pytorch.md has the
whole story.
"""

import collections
import time

import torch

from fulcrum._data import LeaseSampler, LeasedData
from fulcrum._embedding import EmbeddingBag, _pull_with_rejoin
from fulcrum._native import (FAILED_PRECONDITION, FulcrumError, GenerationEnded,
                             NativeWorker, Progress, load_model)


__all__ = ["Worker", "EmbeddingBag", "LeaseSampler", "declared_tensors",
           "load_exported"]


def declared_tensors(model):
    """The (name, tensor) pairs a Worker declares for `model`, in order: its
    parameters, then its floating-point buffers (integer ones such as
    num_batches_tracked stay each worker's own)."""
    return (list(model.named_parameters()) +
            [(n, b) for n, b in model.named_buffers() if b.is_floating_point()])


def load_exported(model, path):
    """Loads what `fulcrumctl export JOB --out PATH` saved of a job's model
    into `model` (the same architecture its workers declared): parameters
    and buffers, in place. Returns the number of updates the values include.
    INVALID_ARGUMENT when the file's size does not match the model."""
    tensors = [t for _, t in declared_tensors(model)]
    flat = torch.empty(sum(t.numel() for t in tensors), dtype=torch.float32)
    version = load_model(path, flat.data_ptr(), flat.numel())
    with torch.no_grad():
        offset = 0
        for t in tensors:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
    return version


class Worker(LeasedData):
    """One worker of job `job` for `model` (see the module's doc).

    Gradients are copied out by autograd hooks and each partition is pushed
    the moment its last gradient exists, so communication overlaps the rest
    of backward; new parameters are copied into the model partition by
    partition as they arrive (on the CPU they arrive in the model's own
    memory: its parameters are views of the received buffer).
    """

    def __init__(self, model, *, coordinator, job, optimizer=None, tls=None,
                 join_timeout=600.0, step_timeout=300.0, rejoin_timeout=60.0,
                 metrics_address="127.0.0.1", metrics_port=0):
        """metrics_port: Prometheus /metrics (fulcrum_worker_*), /healthz and
        /readyz on metrics_address (0: any free port, -1: off); the port is
        w.metrics_port."""
        self.model = model
        self.optimizer = optimizer
        self._params = [p for _, p in model.named_parameters()]
        names = [n for n, _ in model.named_parameters()]
        # Buffers follow the parameters in the flat vector (declared_tensors).
        buffers = declared_tensors(model)[len(self._params):]
        self._buffers = [b for _, b in buffers]
        self._tensors = self._params + self._buffers
        device = str(self._tensors[0].device) if self._tensors else "cpu"
        self._cuda = self._tensors[0].is_cuda if self._tensors else False
        self._native = NativeWorker(coordinator, job, device=device, tls=tls,
                                    step_timeout=step_timeout,
                                    rejoin_timeout=rejoin_timeout,
                                    metrics_address=metrics_address,
                                    metrics_port=metrics_port)
        self.metrics_port = self._native.metrics_port()
        self._native.declare(names + [n for n, _ in buffers],
                             [list(t.shape) for t in self._tensors],
                             buffers={n for n, _ in buffers})
        self._layout()
        pin = self._cuda and torch.cuda.is_available()
        # CUDA: gradients leave on their own stream, so that the copies to
        # the page-locked buffer overlap the rest of backward.
        self._copy_stream = (torch.cuda.Stream(device=self._tensors[0].device)
                             if pin else None)
        total = self._native.num_elements()
        self._flat = torch.empty(total, dtype=torch.float32, pin_memory=pin)
        self._grads = torch.zeros(total, dtype=torch.float32, pin_memory=pin)
        self._model_to_flat()
        self._hooks = [p.register_hook(self._hook(i))
                       for i, p in enumerate(self._params)]
        self.stopped = False
        self.data_done = False  # w.data()/w.sampler() have no batch left
        self._stop_next = False
        self._views = False
        self._progress = Progress()
        self._window = (time.monotonic(), 0)
        self._join(lambda: self._native.join(self._flat.data_ptr(), join_timeout))
        # Embedding tables: rows pulled by forward, gradients pushed by step().
        self._tables = [m for m in model.modules() if isinstance(m, EmbeddingBag)]
        try:
            for m in self._tables:
                m._attach(self)
        except FulcrumError as e:
            self.finish(str(e))  # leaves the job: it does not wait for us
            raise

    # -- layout ------------------------------------------------------------

    def _layout(self):
        self._offsets, offset = [], 0
        for t in self._tensors:  # the flat vector: tensors in declared order
            self._offsets.append(offset)
            offset += t.numel()
        self._parts = self._native.partitions()
        self._tensor_parts = [[] for _ in self._tensors]
        self._part_tensors = [[] for _ in self._parts]
        for pid, (start, size) in enumerate(self._parts):
            for i, p in enumerate(self._tensors):
                lo, hi = self._offsets[i], self._offsets[i] + p.numel()
                if lo < start + size and start < hi:
                    self._tensor_parts[i].append(pid)
                    self._part_tensors[pid].append(i)

    def _model_to_flat(self):
        """The model's values into the flat buffer (what a join uploads)."""
        with torch.no_grad():
            for i, t in enumerate(self._tensors):
                self._slice(self._flat, i).copy_(t.detach().reshape(-1))

    def _slice(self, flat, i):
        return flat[self._offsets[i]:self._offsets[i] + self._tensors[i].numel()]

    # -- membership --------------------------------------------------------

    def _join(self, call):
        try:
            a = call()
        except GenerationEnded as e:
            a = self._next_generation(e)
        self._take(a)

    def _next_generation(self, error, attempts=10):
        """The next generation's assignment; the generation may move on
        again while this worker joins (another member joined or left)."""
        if self.gradient_averaging:
            # The shards hold no weights in this mode: the new generation
            # starts from the values rank 0 uploads from this buffer, which
            # held the last averaged gradient. Every replica's values are
            # the same (one averaged gradient, one optimizer), so any rank 0
            # uploads the model.
            self._model_to_flat()
        for _ in range(attempts):
            try:
                return self._native.rejoin(error.code)
            except GenerationEnded as e:
                error = e
        raise error

    def _take(self, a):
        self.rank, self.world_size = a.rank, a.world_size
        self.generation, self.step_num = a.generation, a.first_step
        self.batch_size, self.epochs = a.batch_size, a.epochs
        self.max_steps, self.seed = a.max_steps, a.seed
        self.target_accuracy = a.target_accuracy
        self.chunk_sharding = bool(a.chunk_sharding)
        self.gradient_averaging = bool(a.gradient_averaging)
        self._load_parameters()
        self._new_step()
        for m in getattr(self, "_tables", ()):
            m._forget()  # the ended generation's step is not applied
        self._lease = None  # leases end with their generation
        self._done_chunks = []
        if not hasattr(self, "_batches"):
            # The batches handed out (w.data(), w.sampler()) and not yet
            # stepped, oldest first: (generation, samples, (chunk, begin,
            # end), chunk finished by this batch or None). A DataLoader may
            # fetch several ahead; a batch of an ended generation steps as
            # an empty push (its chunk is leased again).
            self._batches = collections.deque()

    def _rejoin(self, error):
        try:
            a = self._next_generation(error)
        except FulcrumError:
            if not self._native.leaving():
                raise
            # The job ended elsewhere (another worker reached the target in
            # an ssp/async job, or it was cancelled): this worker is done.
            self.stopped = True
            return
        self._take(a)

    def _load_parameters(self):
        """The job's values into the model: once bound as views on the CPU
        (later versions then land in place), else copied."""
        with torch.no_grad():
            for i, p in enumerate(self._params):
                view = self._slice(self._flat, i).view_as(p)
                if not self._cuda and not self.gradient_averaging:
                    p.data = view
                else:
                    p.copy_(view, non_blocking=self._cuda)
        self._views = not self._cuda and not self.gradient_averaging
        self._load_buffers()

    def _load_buffers(self):
        """The job's buffers (the workers' average) into the model."""
        first = len(self._params)
        with torch.no_grad():
            for i, b in enumerate(self._buffers, first):
                b.copy_(self._slice(self._flat, i).view_as(b),
                        non_blocking=self._cuda)

    def _stage_buffers(self):
        """Once a step, after forward (at the first gradient or at step()):
        the buffers' values go out in their "gradient" slots."""
        if self._buffers_staged:
            return
        self._buffers_staged = True
        with torch.no_grad():
            for i, b in enumerate(self._buffers, len(self._params)):
                self._got[i] = True
                self._to_host(self._slice(self._grads, i), b.detach().reshape(-1))
                self._tensor_done(i)

    # -- one step ----------------------------------------------------------

    def _new_step(self):
        self._remaining = [len(t) for t in self._part_tensors]
        self._got = [False] * len(self._tensors)
        self._buffers_staged = False
        self._pushed = [False] * len(self._parts)
        self._copies = []  # CUDA: (event, partition) copies in flight
        self._samples = None
        self._range = (-1, 0, 0)
        self._batch = None  # the _batches entry this step trains

    def _hook(self, i):
        def on_grad(grad):
            self._stage_buffers()
            if self._got[i]:
                return None
            self._got[i] = True
            self._to_host(self._slice(self._grads, i), grad.detach().reshape(-1))
            self._tensor_done(i)
            return None
        return on_grad

    def _to_host(self, dst, src):
        """src into the page-locked `dst`: on the CPU a copy; on a GPU an
        asynchronous copy on the copy stream, after what the compute stream
        has queued so far (the gradient's kernels)."""
        if self._copy_stream is None:
            dst.copy_(src)
            return
        self._copy_stream.wait_stream(torch.cuda.current_stream(src.device))
        with torch.cuda.stream(self._copy_stream):
            dst.copy_(src, non_blocking=True)
        src.record_stream(self._copy_stream)  # kept until the copy ran

    def _tensor_done(self, i):
        for pid in self._tensor_parts[i]:
            self._remaining[pid] -= 1
            if self._remaining[pid] == 0:
                self._ready(pid)

    def _ready(self, pid):
        if not self._cuda:
            return self._push(pid)
        event = torch.cuda.Event()
        event.record(self._copy_stream)  # after the partition's copies
        self._copies.append((event, pid))
        still = []
        for e, q in self._copies:  # push the copies that have landed
            if e.query():
                self._push(q)
            else:
                still.append((e, q))
        self._copies = still

    def _push(self, pid):
        if self._pushed[pid]:
            return
        self._pushed[pid] = True
        if self._samples is None and self._batches:
            self._batch = self._batches[0]  # this step's batch
            gen, n, rng, _ = self._batch
            self.set_batch(n if gen == self.generation else 0,
                           *(rng if gen == self.generation else (-1, 0, 0)))
        samples = self.batch_size if self._samples is None else self._samples
        chunk, begin, end = self._range
        stop = self._stop_next
        self._native.push(pid, self.step_num, samples if self._has_data else 0,
                          self._grads.data_ptr(), stop, chunk, begin, end)

    @property
    def _has_data(self):
        return self._samples is None or self._samples > 0

    def set_batch(self, samples, chunk=-1, begin=0, end=0):
        """The number of samples (and, with chunk leases, which ones) behind
        this step's gradient, for loops that pick their own batches (w.data()
        and w.sampler() keep track themselves); call it before backward."""
        self._samples = samples
        self._range = (chunk, begin, end)

    def _live(self):
        if self._native is None:
            raise FulcrumError(FAILED_PRECONDITION,
                               "this worker has finished: make a new Worker")

    def step(self):
        """Ends the step: pushes what backward has not, waits for the new
        parameters and loads them. False when the generation ended (the
        step is not applied: the worker re-joined where the shards stand)."""
        self._live()
        if self.stopped:  # batches a DataLoader fetched before the stop
            if self._batches:
                self._batches.popleft()
            for m in self._tables:
                m._forget()
            self._new_step()
            return False
        with torch.no_grad():
            self._stage_buffers()
            for i, p in enumerate(self._params):  # no gradient: zeros
                if not self._got[i]:
                    self._hook(i)(torch.zeros_like(p))
            for e, pid in self._copies:
                e.synchronize()
                self._push(pid)
            for pid in range(len(self._parts)):
                self._push(pid)
        batch = self._batch
        if batch is not None:
            self._batches.popleft()
        try:
            for m in self._tables:  # applied on arrival (docs/embeddings.md)
                m._flush(self.step_num)
            self.stopped = self._native.wait(self.step_num + 1, self._arrived)
        except GenerationEnded as e:
            self._rejoin(e)
            return False
        except FulcrumError:
            if not self._native.leaving():
                raise
            self.stopped = True  # the job ended elsewhere (see _rejoin)
            return False
        if batch is not None and batch[3] is not None and batch[0] == self.generation:
            self._done_chunks.append(batch[3])  # reported with the next lease
        if self.gradient_averaging:
            self._apply_averaged()
        self._load_buffers()
        for p in self._params:
            p.grad = None  # on-shard mode: .grad is never read
        self._account()
        self.step_num += 1
        self._new_step()
        return True

    def _pull_rows(self, table, unique, rows, step):
        self._live()
        _pull_with_rejoin(self, table, unique, rows, step)

    def _empty_step(self, stop=False):
        """A step without data (none leased now), outside the batch queue."""
        self._stop_next = self._stop_next or stop
        self.set_batch(0)
        return self.step()

    def _arrived(self, pid):
        if self._views or self.gradient_averaging:
            return
        start, size = self._parts[pid]
        with torch.no_grad():
            for i in self._part_tensors[pid]:
                if i >= len(self._params):
                    continue  # buffers: _load_buffers, after the wait
                lo = max(start, self._offsets[i])
                hi = min(start + size, self._offsets[i] + self._params[i].numel())
                dst = self._params[i].data.view(-1)[lo - self._offsets[i]:hi - self._offsets[i]]
                dst.copy_(self._flat[lo:hi], non_blocking=True)

    def _apply_averaged(self):
        with torch.no_grad():
            for i, p in enumerate(self._params):
                p.grad = self._slice(self._flat, i).view_as(p).to(p.device).clone()
        if self.optimizer is not None:
            self.optimizer.step()

    def _account(self):
        n = self._samples if self._samples is not None else self.batch_size
        self._progress.step = self.step_num + 1
        self._progress.samples_total += n
        t0, count = self._window
        now, count = time.monotonic(), count + n
        if now - t0 >= 0.5:
            self._progress.samples_per_sec = count / (now - t0)
            now, count = now, 0
            self._window = (now, 0)
        else:
            self._window = (t0, count)
        self._native.report(self._progress)

    # -- progress ----------------------------------------------------------

    def report(self, loss=None, accuracy=None):
        """Progress for the coordinator (fulcrumctl status); rank 0's speaks
        for the job. An accuracy at or above the job's target_accuracy
        stops every worker together after the next step."""
        self._live()
        if loss is not None:
            self._progress.loss = float(loss)
        if accuracy is not None:
            self._progress.test_accuracy = float(accuracy)
            self._progress.evaluated_step = self.step_num
            if self.target_accuracy > 0 and accuracy >= self.target_accuracy:
                self._stop_next = True
        self._native.report(self._progress)

    def finish(self, error=None):
        """Ends this worker's part: done, or failed with `error`; leaves."""
        if self._native is None:
            return
        for h in self._hooks:
            h.remove()
        try:
            self._native.finish(self._progress, error)
        finally:
            self._native.close()
            self._native = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.finish(None if value is None else str(value))
        return False
