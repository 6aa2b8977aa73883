"""Chunk-leased data for fulcrum.torch.Worker: the batch queue behind
w.data(), w.loader() and w.sampler(). A mixin: it reads and writes the
Worker's membership and step state (its methods run on the Worker's
thread)."""

import time

import torch
import torch.utils.data

from fulcrum._native import FulcrumError, GenerationEnded


class LeasedData:
    """This worker's batches: chunk leases from the coordinator (or static
    slices), each batch recorded in the Worker's queue (_batches) until the
    step that trains it."""

    def data(self, dataset, batch_size=None):
        """This worker's batches of a map-style `dataset` (indexable,
        len()), collated as a DataLoader would (w.sampler() is the same as a
        batch sampler for a DataLoader). With chunk sharding (the default)
        it leases chunks of each epoch's order from the coordinator: every
        sample is trained exactly once per epoch, whatever joins, leaves or
        crashes; when it has no batch for a step it takes an empty step
        itself (the others do not wait), and it ends when every epoch is
        trained or a stop came. With static sharding rank r takes the r-th
        slice of every global batch."""
        from torch.utils.data import default_collate
        tensors = getattr(dataset, "tensors", None)  # a TensorDataset: one gather
        for idx in self._indices(len(dataset), batch_size):
            if isinstance(tensors, (tuple, list)):
                rows = torch.as_tensor(idx, dtype=torch.long)
                yield [t[rows] for t in tensors]
            else:
                yield default_collate([dataset[i] for i in idx])

    def loader(self, dataset, batch_size=None, **dataloader_args):
        """This worker's batches through a torch DataLoader (num_workers,
        pin_memory, collate_fn, ... as `dataloader_args`) over w.sampler():
        loader processes prefetch while the model trains, and the exactly-
        once guarantee holds (see sampler()). Ends when the job's data is
        trained or a stop came."""
        if dataloader_args.get("num_workers", 0) > 0:
            dataloader_args.setdefault("persistent_workers", True)
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=self.sampler(len(dataset), batch_size),
            **dataloader_args)
        while not self.data_done:
            yield from loader  # one pass ends where prefetching must pause

    def sampler(self, dataset_size, batch_size=None):
        """A batch sampler over the coordinator's chunk leases, for
        DataLoader(dataset, batch_sampler=w.sampler(len(dataset))). Each
        batch's gradient counts for the samples it holds, and a chunk is
        reported done only after the step of its last batch was applied, so
        a crash loses nothing and prefetching (num_workers > 0) trains no
        sample twice. Call w.step() once per batch, in order. A pass ends
        early when nothing is left to lease now while batches are still in
        flight (they must be trained first): iterate again until
        w.data_done (w.loader() does)."""
        return LeaseSampler(self, dataset_size, batch_size)

    def _indices(self, n, batch_size=None):
        """The index lists of this worker's batches (see data())."""
        self._live()
        batch = batch_size or self.batch_size
        orders = {}

        def order(epoch):
            if epoch not in orders:
                g = torch.Generator().manual_seed(int(self.seed) * 1000003 + epoch)
                orders.clear()
                orders[epoch] = torch.randperm(n, generator=g).tolist()
            return orders[epoch]

        while True:
            if (self.stopped or self._native is None or self._native.leaving()
                    or (self.max_steps and self.step_num >= self.max_steps)):
                self.data_done = True
                return
            if self.max_steps and self.step_num + len(self._batches) >= self.max_steps:
                return  # a pause: the batches in flight are the last ones
            picked = self._next_batch(n, batch, order)
            if picked is None:
                self.data_done = True
                return
            if not picked:
                if self._batches:
                    return  # a pause: those in flight are trained first
                self._empty_step()  # none now: the others do not wait
                continue
            idx, rng, done = picked
            self._batches.append((self.generation, len(idx), rng, done))
            yield idx

    def _next_batch(self, n, batch, order):
        """([indices], (chunk, begin, end), finished chunk or None) for the
        next batch, [] for none now (an empty step), or None when the data
        is trained."""
        if not self.chunk_sharding:
            per_epoch = -(-n // (batch * self.world_size))
            step = self.step_num + len(self._batches)
            if step >= per_epoch * self.epochs:
                return None
            epoch, k = divmod(step, per_epoch)
            first = k * batch * self.world_size + self.rank * batch
            idx = order(epoch)[first:min(first + batch, n)]
            return (idx, (-1, 0, 0), None) if idx else []
        if self._lease is None:
            try:
                # Chunks handed out whole and still in flight (a
                # DataLoader prefetched their batches) stay ours.
                in_flight = sorted({rng[0] for gen, _, rng, _ in self._batches
                                    if gen == self.generation and rng[0] >= 0})
                lease = self._native.lease(self._done_chunks, n, in_flight)
            except GenerationEnded as e:
                self._rejoin(e)
                return []
            except FulcrumError:
                if not self._native.leaving():
                    raise
                self.stopped = True  # the job ended elsewhere (see _rejoin)
                return None
            self._done_chunks = []
            if lease.chunk < 0:
                if lease.exhausted and not self._batches:
                    self._empty_step(stop=True)  # everyone ends together
                    return None if self.stopped else []
                if not self._batches:
                    time.sleep(0.02)  # others train the last chunks
                return []
            self._lease = [lease.chunk, lease.epoch, lease.begin, lease.end]
        chunk, epoch, begin, end = self._lease
        stop = min(begin + batch, end)
        idx = order(epoch)[begin:stop]
        self._lease[2] = stop
        done = None
        if stop >= end:
            done = chunk
            self._lease = None
        self._progress.epoch = epoch
        return idx, (chunk, begin, stop), done


class LeaseSampler(torch.utils.data.Sampler):
    """Worker.sampler(): this worker's batches (index lists) from the
    coordinator's chunk leases, for a DataLoader's batch_sampler. It ends
    when every epoch is trained or the job stopped; iterate it again for
    nothing more (one pass covers the whole job, every epoch). Its length
    is unknown (workers come and go), so __len__ is not defined."""

    def __init__(self, worker, dataset_size, batch_size=None):
        self.worker = worker
        self.dataset_size = dataset_size
        self.batch_size = batch_size

    def __iter__(self):
        return self.worker._indices(self.dataset_size, self.batch_size)
