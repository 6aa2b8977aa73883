"""ctypes bindings of libfulcrum (worker/capi/fulcrum.h). Any Python 3 and
any PyTorch: nothing here is compiled against Python."""

import ctypes
import os

API_VERSION = 3

# absl/gRPC status codes the bindings act on.
CANCELLED = 1
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
FAILED_PRECONDITION = 9
ABORTED = 10
UNAVAILABLE = 14


class FulcrumError(RuntimeError):
    """A failed call: `code` is the status code, the message names the problem."""

    def __init__(self, code, message):
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message


class GenerationEnded(FulcrumError):
    """The job moved to a new membership generation (ABORTED), or a shard stayed
    unreachable (UNAVAILABLE): re-join and resume where the shards stand."""


class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 1024)]


class _Options(ctypes.Structure):
    _fields_ = [
        ("coordinator", ctypes.c_char_p),
        ("job_id", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
        ("tls_cert", ctypes.c_char_p),
        ("tls_key", ctypes.c_char_p),
        ("tls_ca", ctypes.c_char_p),
        ("step_timeout_ms", ctypes.c_int64),
        ("rejoin_timeout_ms", ctypes.c_int64),
        ("metrics_address", ctypes.c_char_p),
        ("metrics_port", ctypes.c_int32),
    ]


class Assignment(ctypes.Structure):
    _fields_ = [
        ("first_step", ctypes.c_int64),
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("generation", ctypes.c_int64),
        ("batch_size", ctypes.c_int32),
        ("epochs", ctypes.c_int32),
        ("max_steps", ctypes.c_int64),
        ("seed", ctypes.c_uint64),
        ("target_accuracy", ctypes.c_double),
        ("chunk_sharding", ctypes.c_int32),
        ("gradient_averaging", ctypes.c_int32),
    ]


class Lease(ctypes.Structure):
    _fields_ = [
        ("chunk", ctypes.c_int64),
        ("epoch", ctypes.c_int32),
        ("begin", ctypes.c_int64),
        ("end", ctypes.c_int64),
        ("exhausted", ctypes.c_int32),
    ]


class Progress(ctypes.Structure):
    _fields_ = [
        ("step", ctypes.c_int64),
        ("epoch", ctypes.c_int32),
        ("loss", ctypes.c_double),
        ("samples_per_sec", ctypes.c_double),
        ("test_accuracy", ctypes.c_double),
        ("evaluated_step", ctypes.c_int64),
        ("samples_total", ctypes.c_int64),
    ]


ARRIVED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)

_lib = None


def _library_path():
    env = os.environ.get("FULCRUM_LIB")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libfulcrum.so")


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise FulcrumError(NOT_FOUND, f"cannot load libfulcrum ({path}): {e}") from e
    P, I32, I64, C = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_char_p
    E = ctypes.POINTER(_Error)
    F = ctypes.POINTER(ctypes.c_float)
    sigs = {
        "fulcrum_api_version": (ctypes.c_int, []),
        "fulcrum_connect": (P, [ctypes.POINTER(_Options), E]),
        "fulcrum_close": (None, [P]),
        "fulcrum_metrics_port": (I32, [P]),
        "fulcrum_load_model": (ctypes.c_int, [C, F, I64, ctypes.POINTER(I64), E]),
        "fulcrum_declare": (ctypes.c_int, [P, I32, ctypes.POINTER(C),
                                           ctypes.POINTER(ctypes.POINTER(I64)),
                                           ctypes.POINTER(I32),
                                           ctypes.POINTER(I32), E]),
        "fulcrum_num_elements": (I64, [P]),
        "fulcrum_num_partitions": (I32, [P]),
        "fulcrum_partition": (None, [P, I32, ctypes.POINTER(I64), ctypes.POINTER(I64)]),
        "fulcrum_join": (ctypes.c_int, [P, F, I64, ctypes.POINTER(Assignment), E]),
        "fulcrum_rejoin": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(Assignment), E]),
        "fulcrum_push": (ctypes.c_int, [P, I32, I64, I64, F, I32, I64, I64, I64, E]),
        "fulcrum_wait": (ctypes.c_int, [P, I64, ARRIVED, P, ctypes.POINTER(I32), E]),
        "fulcrum_lease_chunk": (ctypes.c_int, [P, ctypes.POINTER(I64), I32,
                                               ctypes.POINTER(I64), I32, I64,
                                               ctypes.POINTER(Lease), E]),
        "fulcrum_report": (None, [P, ctypes.POINTER(Progress)]),
        "fulcrum_leaving": (ctypes.c_int, [P]),
        "fulcrum_finish": (ctypes.c_int, [P, ctypes.POINTER(Progress), C, E]),
        "fulcrum_table_dim": (I32, [P, C]),
        "fulcrum_pull_rows": (ctypes.c_int, [P, C, I64, ctypes.POINTER(ctypes.c_uint64), I64, F, E]),
        "fulcrum_push_rows": (ctypes.c_int, [P, C, I64, ctypes.POINTER(ctypes.c_uint64), I64, F, E]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    if lib.fulcrum_api_version() != API_VERSION:
        raise FulcrumError(FAILED_PRECONDITION,
                           f"libfulcrum speaks API {lib.fulcrum_api_version()}, "
                           f"this package {API_VERSION}")
    _lib = lib
    return lib


def api_version():
    return _load().fulcrum_api_version()


def load_model(path, out_ptr, count):
    """Reads a `fulcrumctl export` file into `count` floats at out_ptr;
    returns the version (updates) it holds."""
    version, err = ctypes.c_int64(), _Error()
    _check(_load().fulcrum_load_model(_bytes(path), ctypes.cast(out_ptr, ctypes.POINTER(ctypes.c_float)),
                                      count, ctypes.byref(version), ctypes.byref(err)), err)
    return version.value


def _check(code, err):
    if code == 0:
        return
    message = err.message.decode("utf-8", "replace")
    if code in (ABORTED, UNAVAILABLE):
        raise GenerationEnded(code, message)
    raise FulcrumError(code, message)


def _bytes(s):
    return s.encode() if s else None


class NativeWorker:
    """One fulcrum_worker: the C API, method by method."""

    def __init__(self, coordinator, job, device="cpu", tls=None,
                 step_timeout=300.0, rejoin_timeout=60.0,
                 metrics_address="127.0.0.1", metrics_port=0):
        lib = _load()
        tls = tls or {}
        self._options = _Options(_bytes(coordinator), _bytes(job), _bytes(device),
                                 _bytes(tls.get("cert")), _bytes(tls.get("key")),
                                 _bytes(tls.get("ca")), int(step_timeout * 1000),
                                 int(rejoin_timeout * 1000), _bytes(metrics_address),
                                 int(metrics_port))
        err = _Error()
        self._w = lib.fulcrum_connect(ctypes.byref(self._options), ctypes.byref(err))
        if not self._w:
            _check(err.code or FAILED_PRECONDITION, err)
        self._lib = lib

    def close(self):
        if self._w:
            self._lib.fulcrum_close(self._w)
            self._w = None

    def declare(self, names, shapes, buffers=()):
        """buffers: the names among `names` that are buffers (averaged, not
        optimized)."""
        n = len(names)
        c_names = (ctypes.c_char_p * n)(*[s.encode() for s in names])
        arrays = [(ctypes.c_int64 * max(len(s), 1))(*s) for s in shapes]
        c_shapes = (ctypes.POINTER(ctypes.c_int64) * n)(
            *[ctypes.cast(a, ctypes.POINTER(ctypes.c_int64)) for a in arrays])
        c_ndims = (ctypes.c_int32 * n)(*[len(s) for s in shapes])
        c_buffers = (ctypes.c_int32 * n)(*[int(x in buffers) for x in names])
        err = _Error()
        _check(self._lib.fulcrum_declare(self._w, n, c_names, c_shapes, c_ndims,
                                         c_buffers, ctypes.byref(err)), err)

    def metrics_port(self):
        return self._lib.fulcrum_metrics_port(self._w)

    def num_elements(self):
        return self._lib.fulcrum_num_elements(self._w)

    def partitions(self):
        out = []
        for i in range(self._lib.fulcrum_num_partitions(self._w)):
            off, size = ctypes.c_int64(), ctypes.c_int64()
            self._lib.fulcrum_partition(self._w, i, ctypes.byref(off), ctypes.byref(size))
            out.append((off.value, size.value))
        return out

    def join(self, params_ptr, timeout):
        a, err = Assignment(), _Error()
        _check(self._lib.fulcrum_join(self._w, ctypes.cast(params_ptr, ctypes.POINTER(ctypes.c_float)),
                                      int(timeout * 1000), ctypes.byref(a), ctypes.byref(err)), err)
        return a

    def rejoin(self, code):
        a, err = Assignment(), _Error()
        _check(self._lib.fulcrum_rejoin(self._w, code, ctypes.byref(a), ctypes.byref(err)), err)
        return a

    def push(self, partition, step, samples, grads_ptr, stop, chunk=-1, begin=0, end=0):
        err = _Error()
        _check(self._lib.fulcrum_push(self._w, partition, step, samples,
                                      ctypes.cast(grads_ptr, ctypes.POINTER(ctypes.c_float)),
                                      1 if stop else 0, chunk, begin, end,
                                      ctypes.byref(err)), err)

    def wait(self, clock, arrived=None):
        stop, err = ctypes.c_int32(), _Error()
        cb = ARRIVED(lambda _ctx, pid: arrived(pid)) if arrived else ARRIVED(0)
        _check(self._lib.fulcrum_wait(self._w, clock, cb, None, ctypes.byref(stop),
                                      ctypes.byref(err)), err)
        return bool(stop.value)

    def lease(self, done, dataset_size, in_flight=()):
        arr = (ctypes.c_int64 * max(len(done), 1))(*done)
        held = (ctypes.c_int64 * max(len(in_flight), 1))(*in_flight)
        out, err = Lease(), _Error()
        _check(self._lib.fulcrum_lease_chunk(self._w, arr, len(done), held,
                                             len(in_flight), dataset_size,
                                             ctypes.byref(out), ctypes.byref(err)), err)
        return out

    def report(self, progress):
        self._lib.fulcrum_report(self._w, ctypes.byref(progress))

    def leaving(self):
        return bool(self._lib.fulcrum_leaving(self._w))

    def finish(self, progress, error=None):
        err = _Error()
        _check(self._lib.fulcrum_finish(self._w, ctypes.byref(progress) if progress else None,
                                        _bytes(error), ctypes.byref(err)), err)

    # -- embedding rows (docs/embeddings.md) ---------------------------------

    def table_dim(self, table):
        """Floats per row of the job's table, or -1 without such a table."""
        return self._lib.fulcrum_table_dim(self._w, _bytes(table))

    def pull_rows(self, table, step, ids_ptr, n, out_ptr):
        err = _Error()
        _check(self._lib.fulcrum_pull_rows(
            self._w, _bytes(table), step, ctypes.cast(ids_ptr, ctypes.POINTER(ctypes.c_uint64)), n,
            ctypes.cast(out_ptr, ctypes.POINTER(ctypes.c_float)), ctypes.byref(err)), err)

    def push_rows(self, table, step, ids_ptr, n, grads_ptr):
        err = _Error()
        _check(self._lib.fulcrum_push_rows(
            self._w, _bytes(table), step, ctypes.cast(ids_ptr, ctypes.POINTER(ctypes.c_uint64)), n,
            ctypes.cast(grads_ptr, ctypes.POINTER(ctypes.c_float)), ctypes.byref(err)), err)
