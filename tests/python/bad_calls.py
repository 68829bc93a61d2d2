"""The table of bad calls of evotune.torch.attention, shared by the test
without PyTorch (checks_test.py, on stand-in tensors) and the GPU test
(hostile_tensors_test.py, on real ones).

Each entry builds its call with `make(shape, ...)`, a factory of tensors
(real or stand-in), and says what must happen:
  ("raises", TEXT)    the op refuses it, the message naming the argument
  ("sdpa", TEXT)      evotune's checks send it to SDPA, saying TEXT
  ("runtime", None)   the checks pass; the runtime serves it or has no
                      kernel (SDPA answers): on the GPU, SDPA's answer
"""

SEED = (1, 8, 512, 64)  # B=1 H=8 S=512 D=64, the seed problem


def _seed(make, q_shape=SEED, kv_shape=SEED, **kw):
    return make(q_shape, **kw), make(kv_shape, **kw), make(kv_shape, **kw)


def _shape(b=1, h=8, s=512, d=64):
    return (b, h, s, d)


def _bshd(make, b, h, s, d):
    """[batch, heads, seq, head_dim] views of [batch, seq, heads, head_dim]
    storage."""
    return make((b, h, s, d), strides=(s * h * d, d, h * d, 1))


TABLE = [
    # What SDPA refuses too.
    ("k and v of head_dim 128 under q's 64",
     lambda m: (m(SEED), m(_shape(d=128)), m(_shape(d=128))), {},
     ("raises", "k.shape[3] (head_dim) is 128")),
    ("v with 300 rows under k's 512",
     lambda m: (m(SEED), m(SEED), m(_shape(s=300))), {},
     ("raises", "v.shape[2] (seq) is 300")),
    ("k and v of batch 2 under q's 1",
     lambda m: (m(SEED), m(_shape(b=2)), m(_shape(b=2))), {},
     ("raises", "k.shape[0] (batch) is 2")),
    ("v of 4 heads under k's 8",
     lambda m: (m(SEED), m(SEED), m(_shape(h=4))), {},
     ("raises", "v.shape[1] (heads) is 4")),
    ("8 heads on 3 kv heads",
     lambda m: (m(SEED), m(_shape(h=3)), m(_shape(h=3))), {},
     ("raises", "q's heads (8) must be a multiple")),
    ("3-D q", lambda m: (m((8, 512, 64)), m(SEED), m(SEED)), {},
     ("raises", "q must be 4-D")),
    ("q fp16, k and v bf16",
     lambda m: (m(SEED), m(SEED, dtype="bfloat16"), m(SEED, dtype="bfloat16")),
     {}, ("raises", "one dtype")),
    ("k and v on the CPU under q on the GPU",
     lambda m: (m(SEED), m(SEED, device="cpu"), m(SEED, device="cpu")), {},
     ("raises", "one device")),
    ("a NaN scale", lambda m: _seed(m), {"scale": float("nan")},
     ("raises", "scale must be finite")),
    ("an infinite scale", lambda m: _seed(m), {"scale": float("inf")},
     ("raises", "scale must be finite")),
    # What SDPA serves and evotune's kernels cannot.
    ("scale -0.125", lambda m: _seed(m), {"scale": -0.125},
     ("sdpa", "positive scales")),
    ("scale 0", lambda m: _seed(m), {"scale": 0.0},
     ("sdpa", "positive scales")),
    ("scale 0, causal", lambda m: _seed(m), {"scale": 0.0, "causal": True},
     ("sdpa", "positive scales")),
    ("q 2 bytes off alignment",
     lambda m: (m(SEED, offset=1), m(SEED), m(SEED)), {},
     ("sdpa", "q's data is not 16-byte aligned")),
    ("zero-length q", lambda m: _seed(m, q_shape=_shape(s=0)), {},
     ("sdpa", "q is empty")),
    ("zero-length k and v", lambda m: _seed(m, kv_shape=_shape(s=0)), {},
     ("sdpa", "k is empty")),
    ("CPU tensors", lambda m: _seed(m, device="cpu", dtype="float32"), {},
     ("sdpa", "on cpu")),
    ("fp32", lambda m: _seed(m, dtype="float32"), {},
     ("sdpa", "float16 and bfloat16")),
    ("q with head_dim strided (non-unit last stride)",
     lambda m: (m(SEED, strides=(8 * 512 * 64, 512 * 64, 1, 512)), m(SEED),
                m(SEED)), {},
     ("sdpa", "q.stride(3) is 512")),
    ("k and v broadcast over heads (stride 0)",
     lambda m: (m(SEED), m(SEED, strides=(512 * 64, 0, 64, 1)),
                m(SEED, strides=(512 * 64, 0, 64, 1))), {},
     ("sdpa", "k.stride(1) is 0")),
    ("k's rows overlapping (stride 32 under head_dim 64)",
     lambda m: (m(SEED), m(SEED, strides=(8 * 512 * 64, 512 * 64, 32, 1)),
                m(SEED)), {},
     ("sdpa", "k's rows overlap")),
    ("rows 12 elements apart",
     lambda m: (m(_shape(d=8), strides=(8 * 512 * 12, 512 * 12, 12, 1)),
                m(_shape(d=8)), m(_shape(d=8))), {},
     ("sdpa", "q.stride(2) is 12")),
    # The runtime decides: a kernel or SDPA, never a wrong answer.
    ("head_dim 32", lambda m: _seed(m, _shape(d=32), _shape(d=32)), {},
     ("runtime", None)),
    ("head_dim 96", lambda m: _seed(m, _shape(d=96), _shape(d=96)), {},
     ("runtime", None)),
    ("head_dim 256", lambda m: _seed(m, _shape(d=256), _shape(d=256)), {},
     ("runtime", None)),
    ("batch 5000 of one head",
     lambda m: _seed(m, _shape(5000, 1, 16), _shape(5000, 1, 16)), {},
     ("runtime", None)),
    ("a NaN in q", lambda m: (m(SEED, fill="nan"), m(SEED), m(SEED)), {},
     ("runtime", None)),
    ("an Inf in k", lambda m: (m(SEED), m(SEED, fill="inf"), m(SEED)), {},
     ("runtime", None)),
    ("a decode row whose extent-1 strides are odd",
     lambda m: (m(_shape(s=1), strides=(3, 64, 5, 1)), m(SEED), m(SEED)), {},
     ("runtime", None)),
    ("[b, s, h, d] storage",
     lambda m: (_bshd(m, 1, 8, 512, 64), _bshd(m, 1, 8, 512, 64),
                _bshd(m, 1, 8, 512, 64)), {},
     ("runtime", None)),
    ("causal, 37 queries on 101 keys",
     lambda m: _seed(m, _shape(s=37), _shape(s=101)), {"causal": True},
     ("runtime", None)),
    ("8 heads on 2 kv heads", lambda m: _seed(m, SEED, _shape(h=2)), {},
     ("runtime", None)),
    ("v of head_dim 128 under q and k of 64",
     lambda m: (m(SEED), m(SEED), m(_shape(d=128))), {},
     ("runtime", None)),
    ("MLA's prefill: q and k of head_dim 192, v of 128",
     lambda m: (m(_shape(d=192)), m(_shape(d=192)), m(_shape(d=128))),
     {"causal": True}, ("runtime", None)),
]
