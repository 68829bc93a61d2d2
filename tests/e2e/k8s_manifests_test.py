"""deploy/k8s checked as far as a machine without a cluster can.

`kubectl kustomize` renders the manifests; docs/deploy.md's `create secret`
lines run with --dry-run=client; probes, Service, volumes and Secret mounts
agree with the flags in the containers' arguments; and those arguments, with
the Secrets' contents as files and addresses moved to free loopback ports,
start a real evotuned (TLS, a token per role, health SERVING on the probe
port) and a stand-in evotune-worker that registers with it.

    k8s_manifests_test.py SOURCE_DIR BIN_DIR
"""
import base64
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import yaml

SRC, BIN = sys.argv[1], sys.argv[2]


def fail(msg):
    sys.exit("FAIL: " + msg)


def flags(container):
    """--name=value arguments of a container, as a dict."""
    out = {}
    for arg in container.get("args", []):
        m = re.fullmatch(r"--([a-z_]+)=(.*)", arg)
        if not m:
            fail(f"{container['name']}: argument {arg!r} is not --flag=value")
        out[m.group(1)] = m.group(2)
    return out


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render():
    out = subprocess.run(["kubectl", "kustomize", f"{SRC}/deploy/k8s"],
                         check=True, capture_output=True, text=True).stdout
    return {(d["kind"], d["metadata"]["name"]): d
            for d in yaml.safe_load_all(out) if d}


def readme_secrets(work):
    """Secrets made by docs/deploy.md's commands, on stand-in files in `work`."""
    readme = open(f"{SRC}/docs/deploy.md").read()
    section = readme.split("## Workers on Kubernetes", 1)[1]
    block = section.split("```", 2)[1]
    secrets = {}
    for line in block.splitlines():
        if " create secret " not in line:
            continue
        cmd = shlex.split(line) + ["--dry-run=client", "-o", "yaml"]
        doc = yaml.safe_load(subprocess.run(
            cmd, cwd=work, check=True, capture_output=True, text=True).stdout)
        secrets[doc["metadata"]["name"]] = {
            k: base64.b64decode(v) for k, v in doc["data"].items()}
    if len(secrets) < 4:
        fail(f"docs/deploy.md makes {len(secrets)} secrets: {sorted(secrets)}")
    return secrets


def make_files(work):
    """Tokens and a CA-signed certificate for 127.0.0.1, as docs/deploy.md names them."""
    open(f"{work}/client.token", "w").write("client-secret\n")
    open(f"{work}/worker.token", "w").write("worker-secret\n")
    run = lambda *a: subprocess.run(a, cwd=work, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=evotuned",
        "-keyout", "daemon.key", "-out", "daemon.csr")
    open(f"{work}/ext", "w").write("subjectAltName=DNS:evotuned,IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "daemon.csr", "-CA", "ca.pem", "-CAkey",
        "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out",
        "daemon.pem")


def mount_secrets(pod, container, secrets, root):
    """Writes each mounted Secret's keys under `root`; returns path -> local path."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    paths = {}
    for m in container.get("volumeMounts", []):
        local = f"{root}{m['mountPath']}"
        os.makedirs(local, exist_ok=True)
        paths[m["mountPath"]] = local
        secret = volumes.get(m["name"], {}).get("secret")  # Or a claim.
        if secret is None:
            continue
        name = secret["secretName"]
        if name not in secrets:
            fail(f"{container['name']} mounts Secret {name}, which docs/deploy.md does not make")
        for key, value in secrets[name].items():
            open(f"{local}/{key}", "wb").write(value)
    return paths


def localize(value, paths):
    for mount, local in paths.items():
        if value.startswith(mount + "/"):
            return local + value[len(mount):]
    return value


def check_files(container, args, paths):
    for name in ("token_file", "worker_token_file", "tls_cert", "tls_key", "tls_ca"):
        if name in args and not os.path.isfile(localize(args[name], paths)):
            fail(f"{container['name']}: --{name}={args[name]} is in no mounted Secret")


def check_daemon(objects):
    sts = objects[("StatefulSet", "evotuned")]
    svc = objects[("Service", "evotuned")]
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = flags(c)
    if sts["spec"]["replicas"] != 1:
        fail("evotuned must run as one replica (one SQLite writer)")
    health = port_of(args["health_listen"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if c[probe]["grpc"]["port"] != health:
            fail(f"{probe} is not a gRPC probe of --health_listen's port {health}")
    store = next(m for m in c["volumeMounts"] if m["name"] == "store")
    claims = [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]
    if "store" not in claims or os.path.dirname(args["db"]) != store["mountPath"]:
        fail(f"--db={args['db']} is not on the claimed volume at {store['mountPath']}")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    (sp,) = svc["spec"]["ports"]
    if ports[sp["targetPort"]] != port_of(args["listen"]):
        fail("the Service does not lead to --listen's port")
    return pod, c, args, sp["port"]


def check_worker(objects, service_port):
    dep = objects[("Deployment", "evotune-worker")]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = flags(c)
    if c["resources"]["limits"].get("nvidia.com/gpu") != 1:
        fail("a worker must ask for one nvidia.com/gpu")
    if args["daemon"] != f"evotuned:{service_port}":
        fail(f"workers dial {args['daemon']}, not the Service evotuned:{service_port}")
    return pod, c, args


def wait_serving(port, proc, log):
    """Waits (up to 60 s: a sanitizer build starts slowly) for SERVING.

    wait_for_ready lets a call wait out the channel's reconnect backoff, which
    otherwise fails calls at once for seconds after a first refused connect."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail("evotuned exited: " + open(log).read())
        try:
            if check(b"", timeout=2, wait_for_ready=True) == b"\x08\x01":
                return
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    fail("no SERVING on the health port: " + open(log).read())


def run_both(work, daemon, worker, secrets):
    dpod, dc, dargs, _ = daemon
    wpod, wc, wargs = worker
    dpaths = mount_secrets(dpod, dc, secrets, f"{work}/daemon")
    wpaths = mount_secrets(wpod, wc, secrets, f"{work}/worker")
    check_files(dc, dargs, dpaths)
    check_files(wc, wargs, wpaths)
    listen, health = free_port(), free_port()
    dargs = {k: localize(v, dpaths) for k, v in dargs.items()}
    dargs.update(listen=f"127.0.0.1:{listen}", health_listen=f"127.0.0.1:{health}",
                 evaluator="synthetic")
    log = f"{work}/daemon.log"
    d = subprocess.Popen([f"{BIN}/{dc['command'][0]}"] +
                         [f"--{k}={v}" for k, v in dargs.items()],
                         stderr=open(log, "w"))
    w = None
    try:
        wait_serving(health, d, log)
        wargs = {k: localize(v, wpaths) for k, v in wargs.items()}
        wargs.update(daemon=f"127.0.0.1:{listen}", evaluator="synthetic",
                     name=wargs["name"].replace("$(POD_NAME)", "evotune-worker-7f9c"))
        w = subprocess.Popen([f"{BIN}/{wc['command'][0]}"] +
                             [f"--{k}={v}" for k, v in wargs.items()],
                             stderr=open(f"{work}/worker.log", "w"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if "worker evotune-worker-7f9c registered" in open(log).read():
                break
            time.sleep(0.1)
        else:
            fail("the worker did not register: " + open(f"{work}/worker.log").read())
    finally:
        for p in (w, d):
            if p is not None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=20)
    if d.returncode != 0:
        fail(f"evotuned exited {d.returncode} on SIGTERM")


def main():
    objects = render()
    with tempfile.TemporaryDirectory() as work:
        make_files(work)
        secrets = readme_secrets(work)
        daemon = check_daemon(objects)
        worker = check_worker(objects, daemon[3])
        run_both(work, daemon, worker, secrets)
    print("k8s manifests: rendered, consistent, and their commands run")


main()
