/* The evotune runtime as a C API (libevotune_runtime.so), for programs and
 * languages that cannot link C++ (the Python package loads it with ctypes).
 * The same runtime as evotune/runtime.h: one per process is enough; every
 * function is thread-safe. Status codes are absl::StatusCode's values (0 OK,
 * 3 INVALID_ARGUMENT, 5 NOT_FOUND, 9 FAILED_PRECONDITION, 13 INTERNAL,
 * 14 UNAVAILABLE);
 * evotune_last_error() gives the message of this thread's last failure. */
#ifndef EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_RUNTIME_C_H_
#define EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_RUNTIME_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct evotune_runtime evotune_runtime;

typedef struct {
  int64_t batch, heads, kv_heads, seq_q, seq_k, head_dim;
  int32_t causal; /* bottom-right aligned (per sequence) */
  int32_t bf16;   /* 0: fp16 (Q, O, and K and V unless kv_fp8) */
  /* Where the lengths live (evotune/attention_call.h): EVOTUNE_LAYOUT_*.
   * With lengths on the device seq_q and seq_k bound every sequence's. */
  int32_t layout;
  /* EVOTUNE_LAYOUT_PAGED: keys a page (16-256, a multiple of 16, dividing
   * seq_k, which is the block table's pages * page_size); else 0. */
  int32_t page_size;
  /* 1: K and V are float8 e4m3 (an FP8 KV cache, one byte an element),
   * dequantized by the descale factors of evotune_lengths; 0: bf16's. */
  int32_t kv_fp8;
  /* 1: Q is float8 e4m3 too (FP8 attention; needs kv_fp8), dequantized by
   * q_descale; O is bf16's type. 0: Q is bf16's. */
  int32_t q_fp8;
  /* 1: a sliding window (FlashAttention's window_size): row i sees keys
   * [i + seq_k - seq_q - window_left, i + seq_k - seq_q + window_right],
   * -1 for no bound on a side (window_right -1 with causal). 0: none (both
   * bounds ignored). */
  int32_t windowed;
  int32_t window_left, window_right;
  /* Logit softcapping: scores s * scale become softcap * tanh(s * scale /
   * softcap); 0 for none. */
  float softcap;
  /* 1: attention sinks, whose logits evotune_lengths.sinks passes. */
  int32_t sinks;
  /* 1: ALiBi, whose slopes evotune_lengths.alibi_slopes passes. */
  int32_t alibi;
  /* V's and O's head dim where it differs from head_dim (Q's and K's;
   * DeepSeek's MLA prefill: 192 and 128); 0 for head_dim. */
  int64_t head_dim_v;
} evotune_problem;

#define EVOTUNE_LAYOUT_DENSE 0    /* [batch, heads, seq, head_dim] */
#define EVOTUNE_LAYOUT_VARLEN 1   /* packed, cu_seqlens_q/_k */
#define EVOTUNE_LAYOUT_KV_CACHE 2 /* dense cache, seqused_k */
/* Paged cache: K and V [num_pages, page_size, kv_heads, head_dim] (as
 * tensors: batch num_pages, seq page_size), seqused_k and block_table; Q
 * and O per sequence, or packed with cu_seqlens_q (as VARLEN's: a batch
 * of decode rows and prefill chunks). */
#define EVOTUNE_LAYOUT_PAGED 3

/* What a call reads on the device beside its tensors (in the stream's
 * context): the int32 length arrays the problem's layout needs (NULL where
 * it has none) and, for an FP8 KV cache, the fp32 descale factors
 * (evotune::AttentionCall's: K's element of sequence b and KV head h is its
 * e4m3 value times k_descale[b * descale_batch_stride + h *
 * descale_head_stride]; NULL means 1). */
typedef struct {
  const int32_t* cu_seqlens_q; /* [batch + 1] */
  const int32_t* cu_seqlens_k; /* [batch + 1] */
  const int32_t* seqused_k;    /* [batch] */
  /* EVOTUNE_LAYOUT_PAGED: [batch, block_table_stride] page ids; sequence
   * b's key j is in page block_table[b * block_table_stride + j /
   * page_size]. The stride is at least seq_k / page_size; 0 otherwise. */
  const int32_t* block_table;
  int64_t block_table_stride;
  const float* q_descale; /* q_fp8 only */
  const float* k_descale;
  const float* v_descale;
  int64_t descale_batch_stride, descale_head_stride;
  /* Attention sinks (evotune_problem.sinks, and only then): fp32 [heads],
   * query head h's logit joining its rows' softmax. */
  const float* sinks;
  /* ALiBi (evotune_problem.alibi, and only then): fp32 slopes, query head h
   * of sequence b's at alibi_slopes[b * alibi_batch_stride + h] ([heads]
   * with stride 0, or [batch, heads]); the score of row i and key j gains
   * -slope * |i + seq_k - seq_q - j|. */
  const float* alibi_slopes;
  int64_t alibi_batch_stride;
} evotune_lengths;

/* The layout of the structs below; evotune_runtime_api_version() returns
 * the library's, so a caller built against other headers can refuse it. */
#define EVOTUNE_RUNTIME_API_VERSION 12

/* [batch, heads, seq, head_dim] with unit stride along head_dim (a packed
 * [total, heads, head_dim] tensor: batch 1, seq total); strides and
 * extents in elements, checked against the problem as
 * evotune::AttentionTensor's (evotune/attention_call.h): a call whose
 * tensors do not fit the problem is refused with INVALID_ARGUMENT naming
 * the field ("v.seq"). The caller guarantees that `data` holds the stated
 * extents at these strides. */
typedef struct {
  void* data;
  int64_t batch_stride, head_stride, row_stride;
  int64_t batch, heads, seq, head_dim;
} evotune_tensor;

/* EVOTUNE_RUNTIME_API_VERSION of the library's build. */
int evotune_runtime_api_version(void);

/* NULL on failure (evotune_last_error says why). */
evotune_runtime* evotune_runtime_open_bundle(const char* path);
evotune_runtime* evotune_runtime_open_daemon(const char* address,
                                             const char* token);
/* As evotune_runtime_open_daemon over TLS: `tls_ca` the PEM file of the CA
 * that signed the daemon's certificate, `tls_cert` and `tls_key` this
 * client's for mutual TLS (NULL or "" for none; all NULL: plaintext). */
evotune_runtime* evotune_runtime_open_daemon_tls(const char* address,
                                                 const char* token,
                                                 const char* tls_ca,
                                                 const char* tls_cert,
                                                 const char* tls_key);
void evotune_runtime_close(evotune_runtime* runtime);

/* What the runtime serves, one line for people, into `out` (at most `size`
 * bytes, NUL-terminated): a bundle's "bundle PATH: what it was made for
 * (N kernels for ARCHS, made YYYY-MM-DD)", or the daemon's. */
int evotune_runtime_about(evotune_runtime* runtime, char* out, int64_t size);

/* How long a call for a problem of a class the runtime serves nothing of
 * yet (all but seq_k alike) waits for the daemon's answer: max_us < 0 (the
 * default) until it comes; otherwise at most max_us microseconds (0: not
 * at all), after which evotune_runtime_attention(_lengths) and
 * evotune_runtime_plan answer 14 UNAVAILABLE while the kernel is fetched in
 * the background: serve the call another way and call again (a call after
 * the answer came, outside stream capture, is served by it or gets its
 * error once). _scratch and _describe always wait. A bundle's runtime never
 * waits on the network and ignores it. */
void evotune_runtime_wait_for_new_classes(evotune_runtime* runtime,
                                          int64_t max_us);

/* Fetches and loads in the background, in the context of `stream`, the
 * kernels of up to `limit` problems the daemon served lately for this GPU
 * (what a program starting here likely asks for: its first calls then find
 * them loaded); returns at once. A bundle's runtime has nothing to fetch.
 * Returns 0, or 9 FAILED_PRECONDITION without a CUDA context or device. */
int evotune_runtime_prefetch(evotune_runtime* runtime, void* stream, int limit);

/* The scratch the kernel for `problem` needs (in the context of `stream`, a
 * CUstream): fp32 values and zero-initialised ints. Loads the kernel. */
int evotune_runtime_scratch(evotune_runtime* runtime,
                            const evotune_problem* problem, void* stream,
                            int64_t* workspace_floats, int64_t* counters);

/* "template CONFIG arch (tuned|transferred|default)" into `out` (at most
 * `size` bytes, NUL-terminated). Loads the kernel. */
int evotune_runtime_describe(evotune_runtime* runtime,
                             const evotune_problem* problem, void* stream,
                             char* out, int64_t size);

/* Launches attention on `stream`. scale: finite and positive, 0 means
 * 1/sqrt(head_dim);
 * workspace/counters NULL: the runtime's own per stream (not under stream
 * capture). */
int evotune_runtime_attention(evotune_runtime* runtime,
                              const evotune_problem* problem,
                              const evotune_tensor* q, const evotune_tensor* k,
                              const evotune_tensor* v, const evotune_tensor* o,
                              float scale, float* workspace, int32_t* counters,
                              void* stream);

/* As evotune_runtime_attention, with the lengths a layout other than
 * EVOTUNE_LAYOUT_DENSE reads and an FP8 KV cache's descale factors
 * (lengths may be NULL for a dense problem without them). */
int evotune_runtime_attention_lengths(
    evotune_runtime* runtime, const evotune_problem* problem,
    const evotune_tensor* q, const evotune_tensor* k, const evotune_tensor* v,
    const evotune_tensor* o, const evotune_lengths* lengths, float scale,
    float* workspace, int32_t* counters, void* stream);

/* Plans (evotune/attention_plan.h): the kernel for a problem chosen and
 * loaded once, then run any number of times with no lookup, lock,
 * allocation or host sync (so also under CUDA-graph capture). A plan keeps
 * its kernel (plan again to pick up one tuned since); free every plan before
 * closing its runtime. */
typedef struct evotune_plan evotune_plan;

/* Makes `*plan` the plan of the kernel for `problem` in the context of
 * `stream` (loaded now; a daemon may take a while to answer). The codes of
 * evotune_runtime_attention; `*plan` is NULL unless it returns 0. */
int evotune_runtime_plan(evotune_runtime* runtime,
                         const evotune_problem* problem, void* stream,
                         evotune_plan** plan);
void evotune_plan_free(evotune_plan* plan);
/* The scratch every run must pass: fp32 values and zero-initialised ints
 * (left zero by every run). */
void evotune_plan_scratch(const evotune_plan* plan, int64_t* workspace_floats,
                          int64_t* counters);
/* As evotune_runtime_describe, of the plan's kernel. */
int evotune_plan_describe(const evotune_plan* plan, char* out, int64_t size);
/* Launches the plan's kernel on `stream` (of the plan's context) for
 * `problem`: the plan's, or one with a smaller seq_q or seq_k (a bucket's
 * plan runs every problem within it); anything else is refused with
 * INVALID_ARGUMENT naming the field ("problem.seq_k"). Tensors and lengths
 * as for evotune_runtime_attention_lengths; workspace and counters of
 * evotune_plan_scratch's sizes, required where those are not 0. */
int evotune_plan_run(const evotune_plan* plan, const evotune_problem* problem,
                     const evotune_tensor* q, const evotune_tensor* k,
                     const evotune_tensor* v, const evotune_tensor* o,
                     const evotune_lengths* lengths, float scale,
                     float* workspace, int32_t* counters, void* stream);

const char* evotune_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* EVOTUNE_RUNTIME_INCLUDE_EVOTUNE_RUNTIME_C_H_ */
