"""A client of evotuned over gRPC: the whole Tuner API.

    import evotune
    c = evotune.Client("127.0.0.1:7433", token="...")
    job = c.submit("flash_fwd", evotune.problem(seq_q=1024), max_trials=40)
    c.watch(job)                      # progress on stderr, returns the Job
    best = c.best(evotune.problem(seq_q=1024), k=5)

Messages are those of proto/evotune/v1 (evotune.v1.evotune_pb2). A refused
call raises EvotuneError with the daemon's code and message (which names the
offending field).
"""
import os
import sys
import time

import grpc

from evotune.v1 import bundle_pb2, evotune_pb2, evotune_pb2_grpc

DEFAULT_ADDRESS = "127.0.0.1:7433"
# kKernelBundleFormat of tuner/wire/kernel_bundle.h.
BUNDLE_FORMAT = 1

_DTYPES = {"fp16": evotune_pb2.DTYPE_FP16, "bf16": evotune_pb2.DTYPE_BF16}
_FINAL = {evotune_pb2.JOB_STATE_SUCCEEDED, evotune_pb2.JOB_STATE_FAILED,
          evotune_pb2.JOB_STATE_CANCELLED}


class EvotuneError(Exception):
    """A call the daemon refused or could not answer."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


# evotune.v1.Layout.
_LAYOUTS = {"bhsd": 0, "thd": 1, "cache": 2, "paged": 3}


def problem(batch=1, heads=8, kv_heads=0, seq_q=512, seq_k=0, head_dim=64,
            causal=False, dtype="fp16", layout="bhsd", page_size=0,
            head_dim_v=0):
    """An evotune.v1.Problem; defaults are the seed problem. kv_heads 0 means
    heads, seq_k 0 means seq_q; dtype "fp16" or "bf16"; layout "bhsd",
    "thd" (varlen: seq_q and seq_k bound a bucket), "cache" or "paged"
    (pages of page_size keys) (docs/serving.md); head_dim_v: V's and O's
    head dim where it differs (DeepSeek's MLA prefill: 192 and 128)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype: fp16 or bf16, got {dtype!r}")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: bhsd, thd, cache or paged, got "
                         f"{layout!r}")
    return evotune_pb2.Problem(
        batch=batch, heads=heads, kv_heads=kv_heads or heads, seq_q=seq_q,
        seq_k=seq_k or seq_q, head_dim=head_dim, causal=causal,
        dtype=_DTYPES[dtype], layout=_LAYOUTS[layout], page_size=page_size,
        head_dim_v=head_dim_v)


def _config(values):
    return evotune_pb2.Config(params=[
        evotune_pb2.ParamValue(name=k, value=int(v))
        for k, v in sorted(values.items())])


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{what}: cannot read {path}: {e.strerror}") from None


def _token(token, token_file):
    """The bearer token, as the CLI resolves --token and --token_file."""
    if token_file and token:
        raise ValueError("token and token_file: give one, not both")
    if token_file:
        token = _read(token_file, "token_file").decode().strip()
        if not token:
            raise ValueError(f"token_file: {token_file} is empty")
        return token
    return token if token is not None else os.environ.get("EVOTUNE_TOKEN", "")


def _channel(address, tls_ca, tls_cert, tls_key):
    """Plaintext, or TLS when any tls_ file is given (the CLI's --tls_ca,
    --tls_cert and --tls_key: the CA that signed the daemon's certificate,
    and for mutual TLS the client's certificate and key)."""
    if not (tls_ca or tls_cert or tls_key):
        return grpc.insecure_channel(address)
    if bool(tls_cert) != bool(tls_key):
        raise ValueError("tls_cert and tls_key: give both for mutual TLS")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(tls_ca, "tls_ca") if tls_ca else None,
        private_key=_read(tls_key, "tls_key") if tls_key else None,
        certificate_chain=_read(tls_cert, "tls_cert") if tls_cert else None)
    return grpc.secure_channel(address, credentials)


class Client:
    """One channel to evotuned. address defaults to $EVOTUNE_ADDRESS or
    127.0.0.1:7433; the token is `token`, read from `token_file`, or
    $EVOTUNE_TOKEN; tls_ca (and for mutual TLS tls_cert and tls_key) are PEM
    files that make the channel TLS; timeout_s bounds unary calls (GetKernel
    compiles on a first request and gets at least 300 s). A file that cannot
    be read raises ValueError naming the argument."""

    def __init__(self, address=None, token=None, timeout_s=30.0,
                 token_file=None, tls_ca=None, tls_cert=None, tls_key=None):
        self.address = address or os.environ.get("EVOTUNE_ADDRESS",
                                                 DEFAULT_ADDRESS)
        token = _token(token, token_file)
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self._timeout_s = timeout_s
        self._channel = _channel(self.address, tls_ca, tls_cert, tls_key)
        self._stub = evotune_pb2_grpc.TunerStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout_s=None):
        try:
            return method(request, metadata=self._metadata,
                          timeout=timeout_s or self._timeout_s)
        except grpc.RpcError as e:
            raise EvotuneError(e.code(), e.details()) from None

    def templates(self):
        """Every template: parameter space, constraints, head_dims, dtypes."""
        return list(self._call(self._stub.ListTemplates,
                               evotune_pb2.ListTemplatesRequest()).templates)

    def submit(self, template_name, problem, max_trials=50, max_seconds=3600,
               strategy="", seed=0, device="", strategy_options=None):
        """Starts a search; returns its job id. template_name "" tunes the
        template the daemon ranks first for the problem."""
        req = evotune_pb2.SubmitSearchRequest(
            template_name=template_name, problem=problem,
            budget=evotune_pb2.Budget(max_trials=max_trials,
                                      max_seconds=max_seconds),
            strategy=strategy, seed=seed, device=device,
            strategy_options=strategy_options or {})
        return self._call(self._stub.SubmitSearch, req).job_id

    def tune_model(self, heads, kv_heads, head_dim, dtype="bf16",
                   max_batch=256, max_context=8192, prefill_chunk=2048,
                   max_prefill_tokens=8192, decode_queries=(1, 4),
                   max_trials=12, max_seconds=600, device="", dry_run=False,
                   layer_kinds=(), layout="bhsd", page_size=0, head_dim_v=0,
                   strategy="", strategy_options=None):
        """One search per bucket of a model's serving envelope that needs
        one (Tuner.TuneModel; `evotune tune-model` reads the fields from a
        config.json): returns the buckets (problem, job_id, state,
        submitted). layer_kinds: the kinds of the model's layers, each a
        dict of window_left (keys before each query's own; absent or -1:
        none), softcap, sinks and alibi, e.g. gpt-oss's [{"sinks": True},
        {"window_left": 127, "sinks": True}], BLOOM's [{"alibi": True}];
        none: full attention.
        layout: how the model's calls pass tensors ("bhsd", "thd",
        "cache", or "paged" with page_size keys a page). head_dim_v: the
        values' head dim where it differs (DeepSeek's MLA). strategy and
        strategy_options: each bucket's search's, as submit's. Asked again,
        it resumes; dry_run submits nothing."""
        if layout not in _LAYOUTS:
            raise ValueError(f"layout: one of {sorted(_LAYOUTS)}, got "
                             f"{layout!r}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype: fp16 or bf16, got {dtype!r}")
        kinds = []
        for i, kind in enumerate(layer_kinds):
            unknown = set(kind) - {"window_left", "softcap", "sinks", "alibi"}
            if unknown:
                raise ValueError(f"layer_kinds[{i}]: unknown fields "
                                 f"{sorted(unknown)} (window_left, softcap, "
                                 "sinks, alibi)")
            k = evotune_pb2.LayerKind(softcap=kind.get("softcap", 0),
                                      sinks=kind.get("sinks", False),
                                      alibi=kind.get("alibi", False))
            if kind.get("window_left", -1) >= 0:
                k.window_left = kind["window_left"]
            kinds.append(k)
        req = evotune_pb2.TuneModelRequest(layer_kinds=kinds,
            heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            head_dim_v=head_dim_v, dtype=_DTYPES[dtype], envelope=evotune_pb2.Envelope(
                max_batch=max_batch, max_context=max_context,
                prefill_chunk=prefill_chunk,
                max_prefill_tokens=max_prefill_tokens,
                decode_queries=list(decode_queries),
                layout=_LAYOUTS[layout], page_size=page_size),
            budget=evotune_pb2.Budget(max_trials=max_trials,
                                      max_seconds=max_seconds),
            device=device, dry_run=dry_run, strategy=strategy,
            strategy_options=strategy_options or {})
        return list(self._call(self._stub.TuneModel, req).buckets)

    def job(self, job_id):
        return self._call(self._stub.GetJob,
                          evotune_pb2.GetJobRequest(job_id=job_id))

    def jobs(self, state=evotune_pb2.JOB_STATE_UNSPECIFIED):
        return list(self._call(self._stub.ListJobs,
                               evotune_pb2.ListJobsRequest(state=state)).jobs)

    def cancel(self, job_id):
        return self._call(self._stub.CancelJob,
                          evotune_pb2.CancelJobRequest(job_id=job_id))

    def watch(self, job_id, on_update=None, reconnect_s=120.0):
        """Follows the job until it ends and returns the final Job. Each
        JobUpdate goes to on_update; by default a progress line is written
        to stderr. Reconnects (from the last event seen) while the daemon is
        unreachable, for up to reconnect_s."""
        on_update = on_update or _print_progress
        seen, deadline = 0, time.monotonic() + reconnect_s
        while True:
            req = evotune_pb2.WatchJobRequest(job_id=job_id,
                                              from_sequence=seen)
            try:
                job = None
                for update in self._stub.WatchJob(req, metadata=self._metadata):
                    job = update.job
                    if update.HasField("event"):
                        seen = update.event.sequence
                    on_update(update)
                if job is not None and job.state in _FINAL:
                    return job
            except grpc.RpcError as e:
                if (e.code() != grpc.StatusCode.UNAVAILABLE
                        or time.monotonic() > deadline):
                    raise EvotuneError(e.code(), e.details()) from None
                time.sleep(0.5)

    def best(self, problem, k=1, template_name="", device="",
             tune_on_miss=None):
        """QueryBestResponse: the fastest configs, or transferred ones
        (flagged), or defaults (flagged)."""
        req = evotune_pb2.QueryBestRequest(problem=problem, k=k,
                                           template_name=template_name,
                                           device=device)
        if tune_on_miss is not None:
            req.tune_on_miss = tune_on_miss
        return self._call(self._stub.QueryBest, req)

    def bench(self, template_name, config, problem, device=""):
        """Runs one config (dict NAME -> value) through the search's gates."""
        req = evotune_pb2.EvaluateConfigRequest(
            template_name=template_name, config=_config(config),
            problem=problem, device=device)
        return self._call(self._stub.EvaluateConfig, req,
                          timeout_s=max(self._timeout_s, 300))

    def get_kernel(self, problem, template_name="", device="",
                   tune_on_miss=None):
        """The Kernel message: best config compiled for the device, with its
        launch geometry."""
        req = evotune_pb2.GetKernelRequest(problem=problem,
                                           template_name=template_name,
                                           device=device)
        if tune_on_miss is not None:
            req.tune_on_miss = tune_on_miss
        return self._call(self._stub.GetKernel, req,
                          timeout_s=max(self._timeout_s, 300))

    def export(self, problems, path, template_name="", device=""):
        """Writes a kernel bundle (what `evotune export` writes) of the
        problems' kernels to path; nothing is written if one fails."""
        bundle = bundle_pb2.KernelBundle(format_version=BUNDLE_FORMAT,
                                         created_unix_s=int(time.time()))
        for p in problems:
            bundle.kernels.append(self.get_kernel(p, template_name, device))
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(bundle.SerializeToString())
        os.replace(tmp, path)
        return path


def _print_progress(update):
    job = update.job
    best = (f", best {job.best.latency.median_us:.2f} us"
            if job.HasField("best") else "")
    state = evotune_pb2.JobState.Name(job.state).removeprefix("JOB_STATE_")
    sys.stderr.write(f"\r{job.job_id} {state.lower()}: {job.trials_done}/"
                     f"{job.budget.max_trials} trials{best}   ")
    if job.state in _FINAL:
        sys.stderr.write("\n")
    sys.stderr.flush()
