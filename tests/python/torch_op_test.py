"""evotune.torch on a GPU: the op against an fp32 reference on fresh random
inputs for every problem of a bundle (contiguous and [b, s, h, d] views),
the SDPA fallback for a problem the bundle lacks, CUDA-graph capture and
torch.compile.

    PYTHONPATH=python EVOTUNE_RUNTIME_LIBRARY=build/lib/libevotune_runtime.so \
      python3 tests/python/torch_op_test.py BUNDLE PROBLEM_KEY...
Exits 77 (skipped) without PyTorch or a GPU.
"""
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

import evotune.torch as et


def parse(key):
    p = key.split("_")
    n = lambda s, pre: int(s[len(pre):])
    return dict(b=n(p[0], "b"), h=n(p[1], "h"), kv=n(p[2], "kv"),
                sq=n(p[3], "q"), sk=n(p[4], "k"), d=n(p[5], "d"),
                causal=p[6] == "causal",
                dtype=torch.bfloat16 if p[7] == "bf16" else torch.float16)


def inputs(p, bshd=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def make(heads, seq):
        shape = (p["b"], seq, heads, p["d"]) if bshd else (p["b"], heads, seq, p["d"])
        t = torch.randn(shape, generator=g, device="cuda").to(p["dtype"])
        return t.transpose(1, 2) if bshd else t
    return make(p["h"], p["sq"]), make(p["kv"], p["sk"]), make(p["kv"], p["sk"])


def reference(q, k, v, causal):
    mask = None
    if causal:
        mask = causal_lower_right(q.shape[2], k.shape[2])
    rep = q.shape[1] // k.shape[1]
    k, v = (t.float().repeat_interleave(rep, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q.float(), k, v, attn_mask=mask)


def rel_err(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def main():
    bundle, keys = sys.argv[1], sys.argv[2:]
    et.use(bundle=bundle)
    failures = 0
    for key in keys:
        p = parse(key)
        for bshd in (False, True):
            q, k, v = inputs(p, bshd, seed=len(key))
            kernel = et.kernel_for(q, k, p["causal"])
            o = et.attention(q, k, v, causal=p["causal"])
            err = rel_err(o, reference(q, k, v, p["causal"]))
            ok = kernel is not None and err < 1e-2 and o.shape == q.shape
            failures += not ok
            print(f"{key} {'bshd' if bshd else 'bhsd'}: {kernel}: rel err "
                  f"{err:.1e} {'ok' if ok else 'FAIL'}")

    # A problem the bundle lacks: SDPA answers, with bottom-right causal.
    p = parse(keys[0])
    p.update(sq=37, sk=101, causal=True)
    q, k, v = inputs(p)
    o = et.attention(q, k, v, causal=True)
    err = rel_err(o, reference(q, k, v, True))
    fallback_ok = et.kernel_for(q, k, True) is None and err < 1e-2
    failures += not fallback_ok
    print(f"fallback: rel err {err:.1e} {'ok' if fallback_ok else 'FAIL'}")

    failures += not growing_keys(keys)

    # CUDA graph: capture one call, replay on new inputs.
    p = parse(keys[0])
    q, k, v = inputs(p, seed=1)
    et.attention(q, k, v, causal=p["causal"])  # Loads the kernel.
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_o = et.attention(q, k, v, causal=p["causal"])
    q2, k2, v2 = inputs(p, seed=2)
    for t, new in ((q, q2), (k, k2), (v, v2)):
        t.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    err = rel_err(static_o, reference(q2, k2, v2, p["causal"]))
    failures += not err < 1e-2
    print(f"cuda graph: rel err {err:.1e} {'ok' if err < 1e-2 else 'FAIL'}")

    # torch.compile keeps the op (fullgraph: no break around it).
    compiled = torch.compile(
        lambda q, k, v: et.attention(q, k, v, causal=p["causal"]) * 2,
        fullgraph=True)
    got = compiled(q2, k2, v2)
    err = rel_err(got / 2, reference(q2, k2, v2, p["causal"]))
    failures += not err < 1e-2
    print(f"torch.compile: rel err {err:.1e} {'ok' if err < 1e-2 else 'FAIL'}")
    failures += not readme_block(keys)
    sys.exit(1 if failures else 0)


def growing_keys(keys):
    """A decode problem of the bundle at key lengths up to its own, as an
    engine's loop makes them: views of one cache, and fresh tensors each
    step (a cache grown by concatenation: other strides every call under
    one plan), and keys broadcast over heads mid-loop (SDPA answers)."""
    p = min((parse(key) for key in keys), key=lambda p: p["sq"] - p["sk"])
    q, cache_k, cache_v = inputs(p, seed=3)
    ok = True
    # At least as many keys as queries: a causal row that sees no key is
    # NaN in the reference.
    for n in sorted({p["sq"], p["sq"] + 1, p["sq"] + 16, 1000, p["sk"] // 2,
                     p["sk"] // 2 + 1, p["sk"] - 1, p["sk"]}):
        fresh = (cache_k[:, :, :n].clone(), cache_v[:, :, :n].clone())
        for name, (k, v) in (("view", (cache_k[:, :, :n],
                                       cache_v[:, :, :n])), ("fresh", fresh)):
            o = et.attention(q, k, v, causal=p["causal"])
            err = rel_err(o, reference(q, k, v, p["causal"]))
            kernel = et.kernel_for(q, k, p["causal"], v=v)
            if kernel is None or not err < 1e-2:
                print(f"  {n} keys, {name}: {kernel}: rel err {err:.1e} FAIL")
                ok = False
        if n == 1000:  # Broadcast keys: strides the kernels cannot read.
            k = cache_k[:, :1, :n].expand(-1, p["kv"], -1, -1)
            o = et.attention(q, k, cache_v[:, :, :n], causal=p["causal"])
            err = rel_err(o, reference(q, k, cache_v[:, :, :n], p["causal"]))
            kernel = et.kernel_for(q, k, p["causal"])
            if kernel is not None or not err < 1e-2:
                print(f"  {n} broadcast keys: {kernel}: rel err {err:.1e} FAIL")
                ok = False
    print(f"growing keys ({p['b']}x{p['h']}/{p['kv']} heads, up to "
          f"{p['sk']}): {'ok' if ok else 'FAIL'}")
    return ok


def readme_block(keys):
    """README's Python block, run as written (in the bundle's folder, where
    the bundle is kernels.evtb) on a causal problem of the bundle."""
    import os
    readme = os.environ.get("EVOTUNE_README")
    if not readme:
        return True
    lines, inside = [], False
    section = open(readme).read().split("## Use a tuned kernel", 1)[1]
    for line in section.splitlines():
        if line.startswith("```python"):
            inside = True
        elif inside and line.startswith("```"):
            break
        elif inside:
            lines.append(line)
    p = parse(next(k for k in keys if "_causal_" in k))
    q, k, v = inputs(p, seed=5)
    scope = {"q": q, "k": k, "v": v}
    exec("\n".join(lines), scope)
    err = rel_err(scope["o"], reference(q, k, v, True))
    ok = len(lines) >= 3 and err < 1e-2
    print(f"README block ({len(lines)} lines): rel err {err:.1e} "
          f"{'ok' if ok else 'FAIL'}")
    return ok


if __name__ == "__main__":
    main()
