#!/usr/bin/env bash
# evotuned beyond loopback as the README's "Security" section sets it up:
# TLS with a certificate made here by openssl, separate client and worker
# tokens read from files. The CLI with the CA and the client token runs a
# search to completion on the daemon's local worker (plaintext loopback
# port) and on a remote-style worker that dials the TLS port with the
# worker token; plaintext, an untrusted CA and the wrong role's token are
# refused, and the refusals leave no job behind. Health checking is served
# alone in plaintext on --health_listen.
#
#   tls_test.sh BIN_DIR
set -euo pipefail
bin=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; cat "$work/daemon.log" >&2 2>/dev/null || true; exit 1; }

cd "$work"
make_certs() {  # NAME: NAME.ca.pem, and NAME.pem/.key for localhost
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1-ca" \
    -keyout "$1.ca.key" -out "$1.ca.pem"
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$1.key" \
    -out "$1.csr"
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$1.ca.pem" -CAkey "$1.ca.key" \
    -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.pem"
} >/dev/null 2>&1
make_certs daemon || fail "openssl"
make_certs other || fail "openssl"
printf 'client-secret\n' >client.token
printf 'worker-secret\n' >worker.token
chmod 600 ./*.token ./*.key

# Bad credential flags are refused, naming the flag, before anything is
# written.
for bad in --token_file=missing.token "--tls_cert=daemon.pem"; do
  if "$bin/evotuned" --db="$work/bad.db" --listen=127.0.0.1:0 \
    --evaluator=synthetic --workers=0 "$bad" 2>err; then
    fail "evotuned accepted $bad"
  fi
  grep -q -- "${bad%%=*}\|--tls_key" err || fail "$bad: $(cat err)"
done
[ ! -e bad.db ] || fail "a refused start created the store"

health_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/evotuned" --db="$work/evotune.db" --listen=127.0.0.1:0 \
  --port_file="$work/port" --evaluator=synthetic --workers=1 \
  --health_listen=127.0.0.1:$health_port \
  --tls_cert=daemon.pem --tls_key=daemon.key \
  --token_file=client.token --worker_token_file=worker.token \
  2>"$work/daemon.log" &
pids+=($!)
for _ in $(seq 600); do [ -s port ] && break; sleep 0.1; done
[ -s port ] || fail "evotuned did not start"
grep -q "client token required, worker token required" daemon.log ||
  fail "startup line does not name both tokens"
addr=127.0.0.1:$(cat port)
# Health checking alone in plaintext (for probes that cannot speak TLS):
# SERVING, and no other service there.
/usr/bin/python3 - "$health_port" >health.out 2>&1 <<'PY' || fail "health port: $(cat health.out)"
import sys, grpc
channel = grpc.insecure_channel("127.0.0.1:" + sys.argv[1])
answer = channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
assert answer == b"\x08\x01", answer  # status: SERVING
try:
    channel.unary_unary("/evotune.v1.Tuner/ListJobs")(b"", timeout=10)
    raise SystemExit("the Tuner service answered on the health port")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e.code()
PY
cli() { "$bin/evotune" --address="$addr" --timeout_s=10 "$@"; }
trusted=(--tls_ca=daemon.ca.pem)

# Refusals first: none of them may create a job.
cli --token_file=client.token templates >/dev/null 2>&1 &&
  fail "plaintext call to the TLS port succeeded"
cli --tls_ca=other.ca.pem --token_file=client.token templates >/dev/null 2>&1 &&
  fail "a daemon certificate from an untrusted CA was accepted"
# The certificate names localhost and 127.0.0.1, not other.example.
cli "${trusted[@]}" --tls_server_name=other.example --token_file=client.token \
  templates >/dev/null 2>&1 &&
  fail "a server name the daemon's certificate does not carry was accepted"
cli "${trusted[@]}" --tls_server_name=localhost --token_file=client.token \
  templates >/dev/null || fail "--tls_server_name=localhost was refused"
cli "${trusted[@]}" --token_file=worker.token submit --template_name=naive \
  --max_trials=4 2>err && fail "the worker token submitted a job"
grep -q "worker's token cannot call the Tuner service" err ||
  fail "worker token refusal: $(cat err)"
cli "${trusted[@]}" submit --template_name=naive 2>err &&
  fail "a call without a token was accepted"
cli "${trusted[@]}" --token_file=worker.token --token=x jobs 2>err &&
  fail "--token with --token_file accepted"
grep -q -- "--token_file" err || fail "token flag clash: $(cat err)"
jobs() { cli "${trusted[@]}" --token_file=client.token jobs --json; }
jobs >jobs.out || fail "jobs: $(cat jobs.out)"
grep -qE '"job_?[iI]d"' jobs.out && fail "a refused call left a job"

# A worker that dials the TLS port with the worker token, beside the local
# one; the client token is refused to it.
if "$bin/evotune-worker" --daemon="$addr" "${trusted[@]}" \
  --token_file=client.token --evaluator=synthetic --name=wrong 2>werr; then
  fail "a worker with the client token was accepted"
fi
grep -q "client's token cannot call the WorkerPool service" werr ||
  fail "client token refusal: $(cat werr)"
"$bin/evotune-worker" --daemon="$addr" "${trusted[@]}" --tls_server_name=localhost \
  --token_file=worker.token --evaluator=synthetic --name=remote \
  2>"$work/worker.log" &
pids+=($!)

job=$(cli "${trusted[@]}" --token_file=client.token submit \
  --template_name=naive --max_trials=12 --seed=1)
cli "${trusted[@]}" --token_file=client.token watch "$job" >watch.out ||
  fail "watch exited non-zero"
grep -q "succeeded: 12 trials" watch.out || fail "watch: $(tail -1 watch.out)"
jobs | grep -qE '"job_?[iI]d"' || fail "jobs does not list the job"
grep -q "registered" "$work/worker.log" ||
  fail "the TLS worker did not register: $(cat "$work/worker.log")"
echo "PASS"
