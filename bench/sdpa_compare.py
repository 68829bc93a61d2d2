#!/usr/bin/env python3
"""Times evotune kernels side by side with PyTorch SDPA, in one process.

For every entry of a plan (JSON list of {"name", "bundle", "problem"}: the
kernel a bundle serves for a problem key, e.g. the one-kernel bundle that
bench/export_kernel writes, or with "daemon": ADDRESS instead of "bundle",
the kernel that daemon serves, tuned or not; launched through the evotune
runtime, which
needs PYTHONPATH=python and $EVOTUNE_RUNTIME_LIBRARY, see
python/evotune/runtime.py; an entry's optional "build", {"python": DIR,
"library": SO}, launches it through another build's runtime instead, so
that two builds' kernels are timed in one run), on the same random inputs
(consecutive entries of one problem share its input and output tensors):
  - checks the evotune kernel against an fp32 SDPA reference (and reports
    SDPA flash's own error on the same inputs for scale);
  - times the evotune kernel, SDPA's flash backend and SDPA's cuDNN backend
    the same way: a CUDA graph of REPEAT back-to-back calls, replayed
    REPLAYS times, each replay timed with CUDA events; the median per call.
Prints a table (us, TFLOP/s, TB/s of the bytes the problem must move at
least, ratios, and the read floor: the time of one streaming read of those
bytes, the least any kernel could take) after a device-to-device copy measured in the same run, and
writes it as JSON (GPU, date, commit, copy bandwidth, rows) if asked.

  python3 bench/sdpa_compare.py PLAN.json [--json OUT.json] [--commit SHA]
      [--bundle KERNELS.evtb] [--rounds N] [--interleave]

With --rounds N, every kernel and SDPA's backends are timed N times, the
whole plan over again each round, and the medians reported (the JSON keeps
each round's times: "us_rounds", "flash_us_rounds", "cudnn_us_rounds"): a
run's times drift, and kernels of one problem timed one after another do
not see the same conditions (bench/RESULTS.md, 2026-11-26, stream-K tail).

With --interleave, each problem's kernels and SDPA's two backends are timed
together: their graphs take turns, one replay each (in a random order each
turn), so that the clocks of a board at its power limit, which drift
over seconds, fall on all of them alike (bench/RESULTS.md, 2026-11-26).
With --rounds N as well, that N times, the whole plan over again each round.

With --cold_l2, every call (evotune's and SDPA's alike) is timed alone
after a read of a buffer twice the L2's size, REPLAYS * REPEAT calls each,
the median reported: the time of a call whose inputs come from memory, as
in a model's decode step, where the default measures calls back to back,
each finding in L2 what the call before left there. The copy bandwidth and
the read floor are then timed that way too.

With --bundle, the same kernel is also timed as the PyTorch op
evotune.torch.attention serves it from that bundle, the same way: column
"op us" (and "op_us", "op_err", "op_kernel" in the JSON) where the bundle's
kernel for the problem is the entry's config.
"""
import argparse
import datetime
import importlib.util
import json
import os
import random
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from evotune import checks
from evotune import runtime as evotune_runtime

REPEAT = 20
REPLAYS = 50

def parse_problem(key):
    parts = key.split("_")
    num = lambda s, prefix: int(s[len(prefix):])
    return dict(batch=num(parts[0], "b"), heads=num(parts[1], "h"),
                kv_heads=num(parts[2], "kv"), seq_q=num(parts[3], "q"),
                seq_k=num(parts[4], "k"), head_dim=num(parts[5], "d"),
                causal=parts[6] == "causal",
                dtype=torch.bfloat16 if parts[7] == "bf16" else torch.float16)


_builds = {}


def runtime_of(build):
    """evotune.runtime, or where a plan entry names another build
    ({"python": its python/ folder, "library": its libevotune_runtime.so}),
    that build's runtime module, loaded beside this one: kernels of two
    builds (a change and the commit before it) timed in one run."""
    if build is None:
        return evotune_runtime
    path = os.path.join(build["python"], "evotune", "runtime.py")
    if path not in _builds:
        spec = importlib.util.spec_from_file_location(
            f"evotune_runtime_{len(_builds)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _builds[path] = module
    return _builds[path]


_RUNTIMES = {}  # ((kind, path or address), library): its Runtime.


class EvotuneKernel:
    """The kernel a bundle serves for a problem, launched through the
    evotune runtime (its C API) on the current stream, with the scratch it
    asks for from PyTorch's allocator, so that graphs capture it. Raises
    RuntimeError with the runtime's message where the bundle has no kernel
    for the problem or it cannot be loaded."""

    def __init__(self, entry):
        pr = parse_problem(entry["problem"])
        build = entry.get("build")
        rt = runtime_of(build)
        library = None if build is None else build["library"]
        # One runtime per bundle or daemon (a model's plan names one bundle
        # hundreds of times).
        source = ("daemon", entry["daemon"]) if "daemon" in entry else (
            "bundle", entry["bundle"])
        if (source, library) not in _RUNTIMES:
            _RUNTIMES[source, library] = (
                rt.Runtime.open_daemon(source[1], library=library)
                if source[0] == "daemon" else
                rt.Runtime.open_bundle(source[1], library))
        self.rt = _RUNTIMES[source, library]
        self.runtime = rt
        self.problem = rt.Problem(
            pr["batch"], pr["heads"], pr["kv_heads"], pr["seq_q"],
            pr["seq_k"], pr["head_dim"], int(pr["causal"]),
            int(pr["dtype"] == torch.bfloat16))
        stream = torch.cuda.current_stream().cuda_stream
        rc, served = self.rt.describe(self.problem, stream)
        if rc != 0:
            raise RuntimeError(self.rt.last_error())
        # "template CONFIG arch (tuned|transferred|default)"
        self.template, self.config = served.split()[:2]
        self.served = served.split()[-1].strip("()")
        rc, floats, counters = self.rt.scratch(self.problem, stream)
        if rc != 0:
            raise RuntimeError(self.rt.last_error())
        # Counters start (and stay) at zero between launches.
        self.workspace = (torch.empty(floats, dtype=torch.float32,
                                      device="cuda") if floats else None)
        self.counters = (torch.zeros(counters, dtype=torch.int32,
                                     device="cuda") if counters else None)

    def __call__(self, q, k, v, o, causal):
        # Per call: graphs are captured on their own stream.
        tensors = [self.runtime.Tensor(t.data_ptr(),
                                          *checks.runtime_strides(t),
                                          *t.shape) for t in (q, k, v, o)]
        scratch = [None if t is None else t.data_ptr()
                   for t in (self.workspace, self.counters)]
        args = self.rt.attention_args(
            self.problem, *tensors, 0.0, *scratch,
            torch.cuda.current_stream().cuda_stream)
        if self.rt.launch(args) != 0:
            raise RuntimeError(f"evotune: {self.rt.last_error()}")


def capture(fn):
    """A CUDA graph of REPEAT back-to-back calls of fn (warmed up outside
    it), replayed once."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()  # Warm-up, outside the graph.
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(REPEAT):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph


class ColdL2:
    """--cold_l2: each call timed alone after a read of a buffer twice the
    L2's size (as the evaluator's cold_l2 does), so that it reads its
    inputs from memory, as a model's decode step reads a layer's K/V cache.
    A spin kernel ahead of the read keeps the GPU busy while the host queues
    the read, the call and its events: the time is the call's alone, not
    the host's launch path (SDPA's runs through Python)."""
    SPIN_CYCLES = 400_000  # About 0.2 ms at the H100's clocks.

    def __init__(self):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.buffer = torch.ones(2 * l2 // 4, device="cuda",
                                 dtype=torch.float32)

    def time_one(self, fn):
        torch.cuda._sleep(self.SPIN_CYCLES)
        self.buffer.sum()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0


COLD_L2 = None  # A ColdL2 under --cold_l2.


def graph_timer(fn):
    """A timer of fn: GPU time per call over one replay of a graph of
    REPEAT back-to-back calls."""
    graph = capture(fn)

    def time_one():
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / REPEAT
    return time_one


def cold_timer(fn):
    """A timer of fn: one call timed alone after the L2 read (ColdL2)."""
    fn()  # Warm-up: the first call's lazy setup is not timed.
    return lambda: COLD_L2.time_one(fn)


def time_together(fns):
    """Median GPU time per call of each of fns over REPLAYS replays of its
    graph. The graphs take turns, one replay each, so that a run's drifting
    clocks fall on all of them alike; each turn in a new random order
    (seeded), so that none always follows the same one (what ran just
    before moves a kernel's time by up to 4%, bench/RESULTS.md). Under
    --cold_l2, REPLAYS * REPEAT calls each, each timed alone after the L2
    read (ColdL2), in the same turns."""
    if COLD_L2 is None:
        timers, turns = [graph_timer(fn) for fn in fns], REPLAYS
    else:
        timers, turns = [cold_timer(fn) for fn in fns], REPLAYS * REPEAT
    samples = [[] for _ in timers]
    shuffle = random.Random(0).shuffle
    for _ in range(turns):
        order = list(range(len(timers)))
        shuffle(order)
        for i in order:
            samples[i].append(timers[i]())
    return [statistics.median(x) for x in samples]


def time_us(fn):
    """Median GPU time per call over CUDA-graph replays."""
    return time_together([fn])[0]


def sdpa_mask(pr):
    """SDPA's arguments for evotune's mask. Causal masks are bottom-right
    aligned in evotune (query i sees keys j <= i + seq_k - seq_q); SDPA's
    is_causal is top-left aligned, so unequal lengths take the lower-right
    causal bias, which SDPA's fused backends run without a materialised
    mask."""
    if not pr["causal"]:
        return {}
    if pr["seq_q"] == pr["seq_k"]:
        return {"is_causal": True}
    return {"attn_mask": causal_lower_right(pr["seq_q"], pr["seq_k"])}


def reference_mask(pr):
    """The same mask as booleans, for the fp32 reference (math backend)."""
    if not pr["causal"]:
        return None
    return torch.ones(pr["seq_q"], pr["seq_k"], dtype=torch.bool,
                      device="cuda").tril(diagonal=pr["seq_k"] - pr["seq_q"])


def copy_tbps():
    """Device-to-device copy bandwidth (bytes read + written per second, in
    TB/s) of a 1 GiB buffer: the memory ceiling, measured in the same run."""
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / us / 1e6


# The floor for a memory-bound problem: one streaming read of its bytes,
# 16-byte loads, four in flight per thread, compiled here with NVRTC. n
# counts 16-byte words (an int: PyTorch passes ints as 32 bits).
READ_FLOOR_SOURCE = r"""
extern "C" __global__ void read_floor(const uint4* __restrict__ a, int n,
                                      unsigned* out) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 x0 = __ldcs(a + i), x1 = __ldcs(a + i + stride);
    const uint4 x2 = __ldcs(a + i + 2 * stride), x3 = __ldcs(a + i + 3 * stride);
    acc ^= x0.x ^ x0.w ^ x1.x ^ x1.w ^ x2.x ^ x2.w ^ x3.x ^ x3.w;
  }
  for (; i < n; i += stride) acc ^= a[i].x;
  if (acc == 0x9e3779b9u) out[0] = acc;  // Keeps the loads.
}
"""


def raw_kernel(source, name, options=()):
    """CUDA C++ `source` compiled for this GPU by PyTorch's NVRTC wrapper:
    kernel(grid=, block=, args=[tensors, 32-bit ints], shared_mem=) launches
    kernel `name` on the current stream. RuntimeError where this PyTorch
    cannot compile CUDA source."""
    compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
    if compile_kernel is None:
        raise RuntimeError(f"torch {torch.__version__} cannot compile CUDA "
                           "source (no torch.cuda._compile_kernel)")
    return compile_kernel(source, name, nvcc_options=list(options))


class ReadFloor:
    """Times one streaming read of a buffer of a given size. `load`: the
    load intrinsic (__ldcs: evict first; __ldcg: L2's default policy)."""

    def __init__(self, load="__ldcs"):
        self.kernel = raw_kernel(READ_FLOOR_SOURCE.replace("__ldcs", load),
                                 "read_floor")
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.out = torch.zeros(1, dtype=torch.int32, device="cuda")

    def us(self, nbytes):
        buf = torch.empty(nbytes // 16 * 16, dtype=torch.uint8, device="cuda")
        buf.random_()
        args = [buf, buf.numel() // 16, self.out]
        return time_us(lambda: self.kernel(grid=(8 * self.sms, 1, 1),
                                           block=(256, 1, 1), args=args))


def min_bytes(pr):
    """Bytes a kernel must move at least: Q, K, V read once, O written."""
    q = pr["batch"] * pr["heads"] * pr["seq_q"] * pr["head_dim"]
    kv = pr["batch"] * pr["kv_heads"] * pr["seq_k"] * pr["head_dim"]
    return 2 * (2 * q + 2 * kv)


def random_inputs(pr):
    """Fresh random Q, K, V of a problem, an output buffer and the fp32
    reference output."""
    shape_q = (pr["batch"], pr["heads"], pr["seq_q"], pr["head_dim"])
    shape_kv = (pr["batch"], pr["kv_heads"], pr["seq_k"], pr["head_dim"])
    q = torch.randn(shape_q, device="cuda", dtype=pr["dtype"])
    k = torch.randn(shape_kv, device="cuda", dtype=pr["dtype"])
    v = torch.randn(shape_kv, device="cuda", dtype=pr["dtype"]) + 0.5
    return q, k, v, torch.empty_like(q), reference(q, k, v, pr)


def reference(q, k, v, pr, max_scores=1 << 28):
    """The fp32 reference output, a sequence and a block of query rows at a
    time, so that no block's scores pass max_scores floats (the math
    backend holds them all at once: a model's large calls asked for 22 GiB
    in one piece)."""
    mask = reference_mask(pr)
    rows = max(1, max_scores // (pr["heads"] * pr["seq_k"]))
    ref = torch.empty(q.shape, dtype=torch.float32, device="cuda")
    for b in range(pr["batch"]):
        kb, vb = k[b:b + 1].float(), v[b:b + 1].float()
        for i in range(0, pr["seq_q"], rows):
            ref[b:b + 1, :, i:i + rows] = F.scaled_dot_product_attention(
                q[b:b + 1, :, i:i + rows].float(), kb, vb,
                attn_mask=None if mask is None else mask[i:i + rows],
                enable_gqa=pr["kv_heads"] != pr["heads"])
    return ref


def rel_l2(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def sdpa_call(q, k, v, mask, gqa, backend):
    """One SDPA call restricted to `backend`."""
    def call():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, **mask,
                                                  enable_gqa=gqa)
    return call


SDPA_BACKENDS = ((SDPBackend.FLASH_ATTENTION, "flash"),
                 (SDPBackend.CUDNN_ATTENTION, "cudnn"))


def time_sdpa(q, k, v, mask, gqa, ref, timed=True):
    """SDPA's flash and cuDNN backends: error against ref and (if timed)
    time."""
    result = {}
    for backend, label in SDPA_BACKENDS:
        sdpa = sdpa_call(q, k, v, mask, gqa, backend)
        try:
            result[f"{label}_err"] = rel_l2(sdpa(), ref)
            result[f"{label}_us"] = time_us(sdpa) if timed else None
        except RuntimeError as e:  # Backend unavailable for this shape.
            result[f"{label}_us"] = None
            result[f"{label}_error"] = str(e).splitlines()[0]
    return result


def time_op(op, q, k, v, causal, kernel, ref, result, kernel_fn):
    """The PyTorch op on the same inputs, where it serves the entry's kernel,
    then the kernel again: the op is compared with the mean of the kernel's
    times before and after it (a long run's clocks drift)."""
    served = op.kernel_for(q, k, causal)
    result["op_kernel"] = served
    if not served or not served.startswith(
            f"{kernel.template} {kernel.config} "):
        return
    result["op_err"] = rel_l2(op.attention(q, k, v, causal=causal), ref)
    result["op_us"] = time_us(lambda: op.attention(q, k, v, causal=causal))
    result["us_after_op"] = time_us(kernel_fn)


def time_rounds(timed, rounds):
    """Times every kernel of `timed` ((row, kernel, inputs)) and SDPA on its
    problem rounds - 1 more times, the whole list over again each round (a
    run's clocks and placement drift: one problem's kernels, timed one
    after another, are not timed alike); sets each row's times to the
    medians over the rounds and keeps the rounds' times beside them."""
    for row, _, _ in timed:
        row["us_rounds"] = [row["us"]]
        for label in ("flash", "cudnn"):
            row[f"{label}_us_rounds"] = [row.get(f"{label}_us")]
    for _ in range(rounds - 1):
        sdpa = {}
        for row, kernel, (problem, q, k, v, o, ref) in timed:
            pr = parse_problem(problem)
            if problem not in sdpa:
                sdpa[problem] = time_sdpa(q, k, v, sdpa_mask(pr),
                                          pr["kv_heads"] != pr["heads"], ref)
            for label in ("flash", "cudnn"):
                row[f"{label}_us_rounds"].append(sdpa[problem].get(f"{label}_us"))
            row["us_rounds"].append(
                time_us(lambda: kernel(q, k, v, o, pr["causal"])))
    set_medians([row for row, _, _ in timed])


def time_interleaved(timed, rounds):
    """--interleave: per problem, its kernels of `timed` ((row, kernel,
    inputs)) and SDPA's backends are timed together (time_together), so
    that all see the same clocks, rounds times, the whole list over again
    each round; sets each row's times to the medians over the rounds."""
    groups = {}  # Problem: its rows, in plan order.
    for row, kernel, inputs in timed:
        groups.setdefault(inputs[0], []).append((row, kernel, inputs))
        row["us_rounds"] = []
        for label in ("flash", "cudnn"):
            row[f"{label}_us_rounds"] = []
    for _ in range(rounds):
        for problem, group in groups.items():
            _, q, k, v, o, _ = group[0][2]
            pr = parse_problem(problem)
            fns = [lambda kernel=kernel: kernel(q, k, v, o, pr["causal"])
                   for _, kernel, _ in group]
            labels = [label for backend, label in SDPA_BACKENDS
                      if group[0][0].get(f"{label}_err") is not None]
            fns += [sdpa_call(q, k, v, sdpa_mask(pr),
                              pr["kv_heads"] != pr["heads"], backend)
                    for backend, label in SDPA_BACKENDS if label in labels]
            times = time_together(fns)
            for i, (row, _, _) in enumerate(group):
                row["us_rounds"].append(times[i])
                for label in ("flash", "cudnn"):
                    t = (times[len(group) + labels.index(label)]
                         if label in labels else None)
                    row[f"{label}_us_rounds"].append(t)
    set_medians([row for row, _, _ in timed])


def set_medians(rows):
    """Each row's times: the medians of its rounds' times."""
    for row in rows:
        pr = parse_problem(row["problem"])
        row["us"] = statistics.median(row["us_rounds"])
        for label in ("flash", "cudnn"):
            times = [t for t in row[f"{label}_us_rounds"] if t is not None]
            row[f"{label}_us"] = statistics.median(times) if times else None
        row["tflops"] = flops(pr) / row["us"] / 1e6
        row["tbps"] = min_bytes(pr) / row["us"] / 1e6


def flops(pr):
    return 4.0 * pr["batch"] * pr["heads"] * pr["seq_q"] * pr["seq_k"] * \
        pr["head_dim"] / (2 if pr["causal"] else 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("plan")
    parser.add_argument("--json")
    parser.add_argument("--commit", default="unknown",
                        help="commit of the kernels, for the JSON header")
    parser.add_argument("--bundle", help="also time evotune.torch.attention "
                        "serving this bundle")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time every kernel and SDPA this many times, "
                        "the whole plan over again each round, and report "
                        "the medians")
    parser.add_argument("--interleave", action="store_true",
                        help="time each problem's kernels and SDPA's "
                        "backends together, their replays taking turns")
    parser.add_argument("--cold_l2", action="store_true",
                        help="time every call alone after a read of twice "
                        "the L2, not in graphs of back-to-back calls")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.cold_l2:
        global COLD_L2
        COLD_L2 = ColdL2()
    op = None
    if args.bundle:
        import evotune.torch as op
        op.use(bundle=args.bundle)
    plan = json.load(open(args.plan))
    torch.manual_seed(0)
    rows = []
    copy = copy_tbps()
    try:
        floor = ReadFloor()
    except (OSError, RuntimeError) as e:  # No NVRTC on this machine.
        print(f"read floor not measured: {e}")
        floor = None
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"device-to-device copy {copy:.2f} TB/s")
    sdpa_times = {}  # Per problem: kernels for one problem share SDPA's times.
    inputs = None  # (problem, q, k, v, o, ref) of the entries before.
    timed = []  # (row, kernel, inputs) for later rounds (--interleave).
    for entry in plan:
        problem = entry["problem"]
        pr = parse_problem(problem)
        try:
            kernel = EvotuneKernel(entry)
        except RuntimeError as e:  # E.g. more shared memory than the GPU has.
            print(f"{entry['name']}: not run: {e}")
            continue
        # Consecutive entries of one problem share its tensors: fresh ones
        # per entry landed at alternating addresses, and a kernel's time
        # alternated with them (up to 5% between neighbouring entries).
        if inputs is None or inputs[0] != problem:
            if args.interleave and args.rounds == 1 and timed:
                # One round: the last problem's kernels are timed now, so
                # that its tensors are freed (a plan of large problems
                # would not fit in memory at once).
                time_interleaved(timed, 1)
                timed = []
            inputs = None  # Frees the last problem's tensors first.
            inputs = (problem, *random_inputs(pr))
        _, q, k, v, o, ref = inputs
        gqa = pr["kv_heads"] != pr["heads"]
        o.fill_(float("nan"))
        kernel(q, k, v, o, pr["causal"])
        torch.cuda.synchronize()
        mask = sdpa_mask(pr)
        ours_err = rel_l2(o, ref)
        finite = bool(torch.isfinite(o).all())
        result = {"name": entry["name"], "problem": problem,
                  "config": kernel.config, "template": kernel.template,
                  "served": kernel.served,
                  "rel_err": ours_err, "finite": finite}
        if args.interleave:  # Timed later; launched again for the check.
            for _ in range(REPEAT):
                kernel(q, k, v, o, pr["causal"])
        else:
            result["us"] = time_us(lambda: kernel(q, k, v, o, pr["causal"]))
        # The output of the last timed call: a kernel that leaves state
        # behind (split counters) must be as right on every launch.
        result["rel_err_after_timing"] = rel_l2(o, ref)
        if not result["rel_err_after_timing"] <= max(2 * ours_err, 1e-2):
            print(f"{entry['name']}: WRONG after repeated launches "
                  f"(rel err {result['rel_err_after_timing']:.1e})")
        if op is not None:
            time_op(op, q, k, v, pr["causal"], kernel, ref, result,
                    lambda: kernel(q, k, v, o, pr["causal"]))
        if problem not in sdpa_times:
            sdpa_times[problem] = time_sdpa(
                q, k, v, mask, gqa, ref, timed=not args.interleave)
        result.update(sdpa_times[problem])
        if not args.interleave:
            result["tflops"] = flops(pr) / result["us"] / 1e6
            result["tbps"] = min_bytes(pr) / result["us"] / 1e6
        result["read_floor_us"] = floor.us(min_bytes(pr)) if floor else None
        rows.append(result)
        if args.rounds > 1 or args.interleave:
            timed.append((result, kernel, inputs))
    if args.interleave and timed:
        time_interleaved(timed, args.rounds)
    elif args.rounds > 1:
        time_rounds(timed, args.rounds)

    header = (f"{'problem':<13} {'evotune us':>10} {'TFLOP/s':>8} {'TB/s':>5} "
              f"{'flash us':>9} {'cudnn us':>9} {'flash/ours':>10} "
              f"{'cudnn/ours':>10} {'floor us':>8} {'rel err':>8} "
              f"{'flash err':>9}  config")
    print(header)
    fmt = lambda x: "-" if x is None else f"{x:.2f}"
    for r in rows:
        fl, cu = r.get("flash_us"), r.get("cudnn_us")
        fl_ratio = None if fl is None else fl / r["us"]
        cu_ratio = None if cu is None else cu / r["us"]
        flash_err = r.get("flash_err", float("nan"))
        note = "" if r["finite"] else "  NON-FINITE OUTPUT"
        print(f"{r['name']:<13} {r['us']:>10.2f} {r['tflops']:>8.1f} "
              f"{r['tbps']:>5.2f} "
              f"{fmt(fl):>9} {fmt(cu):>9} {fmt(fl_ratio):>10} "
              f"{fmt(cu_ratio):>10} {fmt(r['read_floor_us']):>8} "
              f"{r['rel_err']:>8.1e} {flash_err:>9.1e}"
              f"  {r['template']} {r['config']}{note}")
        if args.bundle:
            op_us = r.get("op_us")
            bracket = (r["us"] + r.get("us_after_op", r["us"])) / 2
            print(f"{'':<13} op: {fmt(op_us)} us"
                  + (f" ({op_us / bracket:.3f}x the kernel's "
                     f"{r['us']:.2f}/{r['us_after_op']:.2f} us before/after, "
                     f"rel err {r['op_err']:.1e})" if op_us else
                     f" (the op serves {r.get('op_kernel')})"))
    if args.json:
        header = {"gpu": torch.cuda.get_device_name(),
                  "torch": torch.__version__,
                  "date": datetime.date.today().isoformat(),
                  "commit": args.commit, "copy_tbps": copy,
                  "rounds": args.rounds, "interleaved": args.interleave,
                  "cold_l2": args.cold_l2}
        json.dump({**header, "results": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
