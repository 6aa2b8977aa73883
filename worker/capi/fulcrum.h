/* libfulcrum: Fulcrum's worker as a C library, for trainers written in any
 * language (fulcrum.torch loads it with ctypes). One fulcrum_worker is one
 * worker process's membership in one job of an external model: it
 * registers for the job, declares the model's tensors, joins, pushes each
 * gradient partition as soon as backward produced it, receives the new
 * parameters partition by partition, leases data chunks, reports progress
 * and leaves.
 *
 * No C++ types or exceptions cross this header. Every call that can fail
 * returns its status code (0 = OK; otherwise the gRPC/absl code: 3 invalid
 * argument, 5 not found, 9 failed precondition, 10 aborted (the generation
 * ended: call fulcrum_rejoin), 14 unavailable, 1 cancelled, 4 deadline
 * exceeded, ...) and fills *error with the code and a message naming the
 * problem (error may be NULL).
 *
 * Threads: one thread calls a worker's functions, except
 * fulcrum_push, which the same thread may call from inside autograd hooks.
 *
 * Versioned: FULCRUM_API_VERSION; fulcrum_api_version() returns the
 * library's, which a binding checks before anything else. */
#ifndef FULCRUM_WORKER_CAPI_FULCRUM_H_
#define FULCRUM_WORKER_CAPI_FULCRUM_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FULCRUM_API_VERSION 3

typedef struct fulcrum_worker fulcrum_worker;

typedef struct {
  int code;
  char message[1024];
} fulcrum_error;

typedef struct {
  const char* coordinator; /* host:port */
  const char* job_id;      /* the job this process trains */
  const char* device;      /* reported to the coordinator ("cpu", "cuda:0") */
  /* Mutual TLS (all three, or none: plaintext). */
  const char* tls_cert;
  const char* tls_key;
  const char* tls_ca;
  int64_t step_timeout_ms;    /* longest wait for one step's parameters */
  int64_t rejoin_timeout_ms;  /* longest wait for a next generation */
  /* Prometheus /metrics, /healthz, /readyz (the worker's metrics, see
   * docs/metrics.md): address (NULL: 127.0.0.1) and port (0: any free
   * port, -1: off). */
  const char* metrics_address;
  int32_t metrics_port;
} fulcrum_options;

/* What the worker trains now. */
typedef struct {
  int64_t first_step; /* the step to compute next (its parameters are in) */
  int32_t rank;
  int32_t world_size;
  int64_t generation;
  int32_t batch_size; /* per worker, from the job's spec */
  int32_t epochs;
  int64_t max_steps;  /* 0: none */
  uint64_t seed;
  double target_accuracy;
  int32_t chunk_sharding; /* 1: lease data chunks (fulcrum_lease) */
  int32_t gradient_averaging; /* 1: parameters received are averaged grads */
} fulcrum_assignment;

typedef struct {
  int64_t chunk; /* -1: none now (ask again) */
  int32_t epoch;
  int64_t begin, end; /* positions [begin, end) of the epoch's order */
  int32_t exhausted;  /* 1: every chunk of every epoch is trained */
} fulcrum_lease;

typedef struct {
  int64_t step;        /* steps finished */
  int32_t epoch;
  double loss;
  double samples_per_sec;
  double test_accuracy; /* valid when evaluated_step > 0 */
  int64_t evaluated_step;
  int64_t samples_total;
} fulcrum_progress;

int fulcrum_api_version(void);

/* Reads a model file `fulcrumctl export` wrote (the job's flat vector:
 * tensors in declared order) into out[0, count). INVALID_ARGUMENT when the
 * file holds another number of floats (the message says how many);
 * NOT_FOUND, DATA_LOSS (corrupt: CRC) as the file is. *version: the
 * updates the parameters include (may be NULL). Needs no worker. */
int fulcrum_load_model(const char* path, float* out, int64_t count,
                       int64_t* version, fulcrum_error* error);

/* Registers with the coordinator for options->job_id (NOT_FOUND for an
 * unknown job; FAILED_PRECONDITION for a job of a built-in model). */
fulcrum_worker* fulcrum_connect(const fulcrum_options* options,
                                fulcrum_error* error);
/* The port of the worker's metrics endpoint; -1 when off. */
int32_t fulcrum_metrics_port(const fulcrum_worker* worker);
/* Leaves the job and the coordinator and frees the worker. */
void fulcrum_close(fulcrum_worker* worker);

/* The model's tensors in order: names[i], shapes[i] (ndims[i] dimensions).
 * buffers[i] = 1 marks a buffer (a running statistic such as BatchNorm's
 * running_mean): its "gradient" slot carries the tensor's value, and the
 * shards keep the pushes' average there instead of an optimizer step
 * (buffers may be NULL: none). The first worker's declaration becomes the
 * job's; others must match (names, shapes and kinds). */
int fulcrum_declare(fulcrum_worker* worker, int32_t count,
                    const char* const* names, const int64_t* const* shapes,
                    const int32_t* ndims, const int32_t* buffers,
                    fulcrum_error* error);
/* After fulcrum_declare: the flat vector's length, and its partitions (the
 * units of pushes and arrivals: contiguous ranges of the flat vector). */
int64_t fulcrum_num_elements(const fulcrum_worker* worker);
int32_t fulcrum_num_partitions(const fulcrum_worker* worker);
void fulcrum_partition(const fulcrum_worker* worker, int32_t id,
                       int64_t* offset, int64_t* size);

/* Waits (timeout_ms) for the job to take this worker in and joins its
 * generation. `params` (fulcrum_num_elements floats) holds this worker's
 * values, which it uploads when the shards have none yet; on return it
 * holds the job's, and later arrivals land there too: the same buffer for
 * the worker's whole life. */
int fulcrum_join(fulcrum_worker* worker, float* params, int64_t timeout_ms,
                 fulcrum_assignment* out, fulcrum_error* error);
/* After fulcrum_wait or a step failed with ABORTED/UNAVAILABLE (the
 * generation ended): waits for the next generation and joins it. */
int fulcrum_rejoin(fulcrum_worker* worker, int code, fulcrum_assignment* out,
                   fulcrum_error* error);

/* Queues partition `id`'s gradient for `step` (read from grads + offset;
 * `grads` must stay unchanged until fulcrum_wait returns). samples = 0: an
 * empty push (no data this step). chunk >= 0 names the samples behind the
 * gradient: [begin, end) of that leased chunk. */
int fulcrum_push(fulcrum_worker* worker, int32_t id, int64_t step,
                 int64_t samples, const float* grads, int32_t stop,
                 int64_t chunk, int64_t begin, int64_t end,
                 fulcrum_error* error);
/* Waits until every partition arrived for step `clock`, calling
 * arrived(context, id) on this thread for each as soon as it has (may be
 * NULL). *stop: a worker asked everyone to stop after this step. */
typedef void (*fulcrum_arrived_fn)(void* context, int32_t id);
int fulcrum_wait(fulcrum_worker* worker, int64_t clock,
                 fulcrum_arrived_fn arrived, void* context, int32_t* stop,
                 fulcrum_error* error);

/* Embedding tables (docs/embeddings.md; version 3). After fulcrum_join.
 * fulcrum_table_dim: floats per row of the job's table `table`, or -1 when
 * the job has no such table. */
int32_t fulcrum_table_dim(const fulcrum_worker* worker, const char* table);
/* Rows of ids[0, n) (repeats allowed) into out[0, n x dim), in order:
 * resident rows as they are, the others as their initial values. `step`:
 * the step they are for (a table with a staleness bound waits until every
 * member pushed the steps before step - staleness); -1: no wait. */
int fulcrum_pull_rows(fulcrum_worker* worker, const char* table,
                      int64_t step, const uint64_t* ids, int64_t n,
                      float* out, fulcrum_error* error);
/* The rows' gradients of `step`: grads[0, n x dim) for ids[0, n), repeats
 * summed here. Returns once every shard acknowledged (a retry is never
 * applied twice). Call it once per table every step, with n = 0 when the
 * step touched none of its rows (tables with a staleness bound count
 * steps). ABORTED: the generation ended (fulcrum_rejoin). */
int fulcrum_push_rows(fulcrum_worker* worker, const char* table, int64_t step,
                      const uint64_t* ids, int64_t n, const float* grads,
                      fulcrum_error* error);

/* Reports the chunks finished since the last call and leases the next.
 * in_flight: chunks handed out whole (a data loader prefetches) but not yet
 * trained; they stay this worker's and it gets a next one besides (at most
 * 4 held; then none now). May be NULL with in_flight_count 0. */
int fulcrum_lease_chunk(fulcrum_worker* worker, const int64_t* done,
                        int32_t done_count, const int64_t* in_flight,
                        int32_t in_flight_count, int64_t dataset_size,
                        fulcrum_lease* out, fulcrum_error* error);
/* The latest progress, sent with heartbeats (rank 0's speaks for the job). */
void fulcrum_report(fulcrum_worker* worker, const fulcrum_progress* progress);
/* 1 when the worker is leaving (the job was cancelled or ended elsewhere). */
int fulcrum_leaving(fulcrum_worker* worker);
/* The worker's part ends: done (error NULL or "") or failed with `error`. */
int fulcrum_finish(fulcrum_worker* worker, const fulcrum_progress* progress,
                   const char* error_message, fulcrum_error* error);

#ifdef __cplusplus
}
#endif

#endif /* FULCRUM_WORKER_CAPI_FULCRUM_H_ */
