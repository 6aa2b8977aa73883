"""fulcrum.torch.EmbeddingBag: rows of a job's embedding table, held on the
shards (docs/embeddings.md).

Like torch.nn.EmbeddingBag, but the table has no local weight: each forward
pulls the rows its ids need (each distinct id once), and after backward the
Worker pushes their gradients with its step. Ids are int64 tensors holding
uint64 ids (hashed features: any 64-bit pattern).
"""

import torch
import torch.nn.functional as F

from fulcrum._native import NOT_FOUND, FulcrumError, GenerationEnded


class EmbeddingBag(torch.nn.Module):
    """A bag ("sum" or "mean") of rows of the job's table `table` (rows of
    `dim` floats; the job spec declares the table). Bound to a Worker when
    the Worker is made with a model that contains it."""

    def __init__(self, table, dim, mode="sum"):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise ValueError(f"mode must be 'sum' or 'mean', got {mode!r}")
        self.table, self.dim, self.mode = table, int(dim), mode
        self._worker = None
        self._pending = []  # (distinct ids, their rows) of this step's forwards

    def extra_repr(self):
        return f"table={self.table!r}, dim={self.dim}, mode={self.mode!r}"

    def _attach(self, worker):
        got = worker._native.table_dim(self.table)
        if got < 0:
            raise FulcrumError(NOT_FOUND, f"table: the job has no embedding table "
                                          f"'{self.table}' (declare it under embeddings:)")
        if got != self.dim:
            raise FulcrumError(3, f"table '{self.table}' has dim {got} in the job, "
                                  f"the module says {self.dim}")
        self._worker = worker

    def forward(self, ids, offsets=None, per_sample_weights=None):
        """ids: 2-D [bags, ids per bag], or 1-D with `offsets` (as
        torch.nn.EmbeddingBag)."""
        if self._worker is None:
            raise FulcrumError(9, f"EmbeddingBag '{self.table}' belongs to no Worker: "
                                  "make the Worker with the model that holds it")
        device = ids.device
        flat = ids.reshape(-1).to("cpu", torch.int64)
        unique, inverse = torch.unique(flat, return_inverse=True)
        unique = unique.contiguous()
        rows = torch.empty(len(unique), self.dim, dtype=torch.float32)
        training = self.training and torch.is_grad_enabled()
        # Training reads wait for the table's staleness bound; others don't.
        self._worker._pull_rows(self.table, unique, rows,
                                self._worker.step_num if training else -1)
        rows = rows.to(device)
        if training:
            rows.requires_grad_(True)
            self._pending.append((unique, rows))
        return F.embedding_bag(inverse.reshape(ids.shape).to(device), rows, offsets,
                               mode=self.mode, per_sample_weights=per_sample_weights)

    def _flush(self, step):
        """Pushes this step's row gradients (Worker.step calls it): one push
        per step, with no rows when forward did not run (a table with a
        staleness bound counts every member's steps)."""
        pending, self._pending = self._pending, []
        ids, grads = [], []
        for unique, rows in pending:
            if rows.grad is not None:
                ids.append(unique)
                grads.append(rows.grad.detach().to("cpu", torch.float32))
        ids = torch.cat(ids) if ids else torch.empty(0, dtype=torch.int64)
        grad = (torch.cat(grads) if grads else torch.empty(0, self.dim)).contiguous()
        self._worker._native.push_rows(self.table, step, ids.data_ptr(), len(ids),
                                       grad.data_ptr())

    def _forget(self):
        self._pending = []


def _pull_with_rejoin(worker, table, unique, rows, step):
    """Pulls rows; when the generation ended, re-joins once and pulls again
    (for the step the worker resumes at)."""
    try:
        worker._native.pull_rows(table, step, unique.data_ptr(), len(unique), rows.data_ptr())
    except GenerationEnded as e:
        worker._rejoin(e)
        step = worker.step_num if step >= 0 else -1
        worker._native.pull_rows(table, step, unique.data_ptr(), len(unique), rows.data_ptr())
