#!/usr/bin/env bash
# The Python package end to end: `pip install ./python` into a fresh virtual
# environment (offline: Debian's grpcio and protobuf, stubs generated from
# proto/ at install), then evotune.Client against evotuned with the
# synthetic evaluator and a token (every call of the API, refusals raising
# EvotuneError with the daemon's code and field), and against a replay of
# the recorded H100 (get_kernel, export: a bundle the runtime reads), and
# over TLS with a token file.
#
#   python_client_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=$1
bin=$2
python=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; cat "$work/daemon.log" >&2 2>/dev/null || true; exit 1; }

"$python" -m venv --system-site-packages "$work/venv" || fail "no venv"
cp -r "$src/python" "$src/proto" "$work/"  # Builds in a copy: no litter.
"$work/venv/bin/pip" install --no-build-isolation --no-deps -q "$work/python" \
  >"$work/pip.log" 2>&1 || fail "pip install ./python: $(tail -5 "$work/pip.log")"

start_daemon() {
  rm -f "$work/port"
  "$bin/evotuned" "$@" --db="$work/$RANDOM.db" --listen=127.0.0.1:0 \
    --port_file="$work/port" 2>"$work/daemon.log" &
  pid=$!
  for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || fail "evotuned did not start"
  address=127.0.0.1:$(cat "$work/port")
}

start_daemon --evaluator=synthetic --synthetic_delay_ms=5 --token=py-token
cd "$work"
"$work/venv/bin/python" - "$address" <<'PY' || fail "client against the synthetic daemon"
import sys
import grpc
import evotune
from evotune.v1 import evotune_pb2

address = sys.argv[1]
c = evotune.Client(address, token="py-token")
names = [t.name for t in c.templates()]
assert "flash_fwd" in names and "naive" in names, names
seed = evotune.problem()
job_id = c.submit("naive", seed, max_trials=6, seed=3)
updates = []
job = c.watch(job_id, on_update=updates.append)
assert job.state == evotune_pb2.JOB_STATE_SUCCEEDED, job
assert job.trials_done == 6 and len(updates) >= 7, (job, len(updates))
assert c.job(job_id).job_id == job_id
assert any(j.job_id == job_id for j in c.jobs())
best = c.best(seed, k=3)
assert not best.transferred and len(best.results) == 3, best
assert best.results[0].trial.latency.median_us <= best.results[1].trial.latency.median_us
config = {p.name: p.value for p in best.results[0].trial.config.params}
r = c.bench("naive", config, seed)
assert r.cached and r.trial.status == evotune_pb2.TRIAL_STATUS_OK, r
long_job = c.submit("naive", evotune.problem(seq_q=256), max_trials=1000)
assert c.cancel(long_job).state in (evotune_pb2.JOB_STATE_CANCELLED,
                                    evotune_pb2.JOB_STATE_RUNNING)

buckets = c.tune_model(8, 2, 64, "fp16", max_batch=2, max_context=256,
                       prefill_chunk=0, max_prefill_tokens=128,
                       decode_queries=[1], max_trials=2)
assert len(buckets) == 13 and all(b.submitted for b in buckets), buckets
for b in buckets:
    assert c.watch(b.job_id).state == evotune_pb2.JOB_STATE_SUCCEEDED, b
again = c.tune_model(8, 2, 64, "fp16", max_batch=2, max_context=256,
                     prefill_chunk=0, max_prefill_tokens=128,
                     decode_queries=[1], max_trials=2)
assert [b.job_id for b in again] == [b.job_id for b in buckets], again
assert not any(b.submitted for b in again), again
# gpt-oss's two kinds of layers: the buckets of each.
kinds = c.tune_model(8, 2, 64, "fp16", max_batch=2, max_context=256,
                     prefill_chunk=0, max_prefill_tokens=128,
                     decode_queries=[1], dry_run=True,
                     layer_kinds=[{"sinks": True},
                                  {"window_left": 127, "sinks": True}])
assert len(kinds) == 26 and all(b.problem.sinks for b in kinds), kinds
assert not kinds[0].problem.HasField("window_left"), kinds[0]
assert kinds[13].problem.window_left == 127, kinds[13]
paged = c.tune_model(8, 2, 64, "fp16", max_batch=2, max_context=256,
                     prefill_chunk=0, max_prefill_tokens=128,
                     decode_queries=[1], dry_run=True, layout="paged",
                     page_size=16)
assert paged and all(b.problem.page_size == 16 and b.problem.layout == 3
                     for b in paged), paged
try:
    c.tune_model(8, 2, 64, layer_kinds=[{"window": 127}])
    raise AssertionError("an unknown layer kind field was taken")
except ValueError as e:
    assert str(e).startswith("layer_kinds[0]: unknown fields"), e

def refused(code, prefix, call):
    try:
        call()
    except evotune.EvotuneError as e:
        assert e.code == code, (e.code, e.message)
        assert e.message.startswith(prefix), e.message
        return
    raise AssertionError(f"not refused: {prefix}")

refused(grpc.StatusCode.INVALID_ARGUMENT, "problem.kv_heads",
        lambda: c.submit("naive", evotune.problem(kv_heads=3)))
refused(grpc.StatusCode.INVALID_ARGUMENT, "envelope.max_batch",
        lambda: c.tune_model(8, 2, 64, max_batch=0))
refused(grpc.StatusCode.INVALID_ARGUMENT, "template_name",
        lambda: c.best(seed, template_name="nope"))
refused(grpc.StatusCode.NOT_FOUND, "", lambda: c.job("j-none"))
# The synthetic device has no architecture to compile for.
refused(grpc.StatusCode.FAILED_PRECONDITION, "device: ",
        lambda: c.get_kernel(seed))
refused(grpc.StatusCode.UNAUTHENTICATED, "",
        lambda: evotune.Client(address, token="wrong").templates())
print("synthetic daemon: ok")
PY
kill "$pid"; wait "$pid" || true; pid=""

start_daemon --simulate="$src/tests/data/flash_fwd_landscapes_h100.csv"
"$work/venv/bin/python" - "$address" "$work/k.evtb" <<'PY' || fail "client against a replay"
import sys
import evotune
from evotune.v1 import bundle_pb2

address, path = sys.argv[1:]
c = evotune.Client(address)
seed = evotune.problem()
c.watch(c.submit("flash_fwd", seed, max_trials=40), on_update=lambda u: None)
k = c.get_kernel(seed)
assert k.arch == "sm_90a" and k.cubin[:4] == b"\x7fELF", k.arch
assert k.template_name == "flash_fwd" and not k.transferred
assert k.geometry.grid_x > 0 and k.geometry.block_threads > 0
assert ".entry " + k.kernel_name in k.ptx
other = evotune.problem(batch=2, seq_q=700, dtype="bf16", causal=True)
c.export([seed, other], path)
bundle = bundle_pb2.KernelBundle()
bundle.ParseFromString(open(path, "rb").read())
assert bundle.format_version == evotune.BUNDLE_FORMAT
assert [x.problem.seq_q for x in bundle.kernels] == [512, 700]
assert bundle.kernels[1].transferred or bundle.kernels[1].defaults
print("replay daemon: ok")
PY
# Over TLS with tokens from files, as the README's "Security" sets it up.
kill "$pid"; wait "$pid" || true; pid=""
{
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ca -keyout ca.key -out ca.pem
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout d.key -out d.csr
  printf 'subjectAltName=IP:127.0.0.1\n' >d.ext
  openssl x509 -req -in d.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile d.ext -out d.pem
} >/dev/null 2>&1 || fail "openssl"
printf 'tls-token\n' >client.token
start_daemon --evaluator=synthetic --tls_cert=d.pem --tls_key=d.key --token_file=client.token
"$work/venv/bin/python" - "$address" <<'PY' || fail "client over TLS"
import sys
import grpc
import evotune

address = sys.argv[1]
c = evotune.Client(address, token_file="client.token", tls_ca="ca.pem")
assert "naive" in [t.name for t in c.templates()]
for kwargs, code in [({"token_file": "client.token"}, grpc.StatusCode.UNAVAILABLE),
                     ({"tls_ca": "ca.pem"}, grpc.StatusCode.UNAUTHENTICATED)]:
    try:
        evotune.Client(address, timeout_s=5, **kwargs).templates()
        raise AssertionError(f"served without {kwargs}")
    except evotune.EvotuneError as e:
        assert e.code == code, (kwargs, e.code, e.message)
for kwargs, field in [({"tls_ca": "missing.pem"}, "tls_ca: cannot read"),
                      ({"token_file": "missing"}, "token_file: cannot read"),
                      ({"token": "x", "token_file": "client.token"}, "token and token_file"),
                      ({"tls_cert": "d.pem"}, "tls_cert and tls_key")]:
    try:
        evotune.Client(address, **kwargs)
        raise AssertionError(f"accepted {kwargs}")
    except ValueError as e:
        assert str(e).startswith(field), (kwargs, str(e))
print("TLS: ok")
PY
# The runtime reads what the Python client exported (without a GPU the
# example says so after opening the bundle).
"$bin/attention_example" --bundle="$work/k.evtb" \
  --problem=b1_h8_kv8_q512_k512_d64_full_fp16_bhsd >"$work/ex.out" 2>&1 ||
  grep -q "no CUDA device" "$work/ex.out" || fail "runtime on the exported bundle: $(cat "$work/ex.out")"
echo PASS
