#include "tuner/evaluator/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace evotune {

namespace {

// Round-to-nearest-even to e4m3, saturating to its largest finite value
// (448) as cvt.rn.satfinite does; NaN to 0x7f.
uint16_t FloatToE4m3Bits(float f) {
  const uint16_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (std::isnan(f)) return 0x7f;
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) {  // Below 2^-6: subnormal, steps of 2^-9.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 512.0f));
  }
  int exponent;
  std::frexp(a, &exponent);  // a = m * 2^exponent, m in [0.5, 1).
  const int e = exponent - 1;
  int mantissa = static_cast<int>(std::nearbyint((std::ldexp(a, -e) - 1) * 8));
  int biased = e + 7;
  if (mantissa == 8) {
    mantissa = 0;
    ++biased;
  }
  return std::min<uint16_t>(
      sign | 0x7e, sign | static_cast<uint16_t>(biased << 3 | mantissa));
}

float E4m3BitsToFloat(uint16_t bits) {
  const int e = (bits >> 3) & 0xf;
  const int m = bits & 7;
  if (e == 0xf && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude =
      e == 0 ? std::ldexp(static_cast<float>(m), -9)
             : std::ldexp(1.0f + static_cast<float>(m) / 8, e - 7);
  return bits & 0x80 ? -magnitude : magnitude;
}

}  // namespace

uint16_t FloatToHalfBits(float f, DType dtype) {
  if (dtype == DType::kE4m3) return FloatToE4m3Bits(f);
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if (dtype == DType::kBf16) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN.
    const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>((x + rounding) >> 16);
  }
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // Inf.
  if (abs < 0x38800000u) {
    // Subnormal half: scale so that the integer rounding is exact.
    const float scaled = std::fabs(f) * 16777216.0f;  // 2^24.
    return static_cast<uint16_t>(sign |
                                 static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t exponent = ((abs >> 23) - 112) << 10;
  const uint32_t mantissa = abs & 0x7fffffu;
  uint32_t h = exponent | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfBitsToFloat(uint16_t bits, DType dtype) {
  if (dtype == DType::kE4m3) return E4m3BitsToFloat(bits);
  uint32_t x;
  if (dtype == DType::kBf16) {
    x = static_cast<uint32_t>(bits) << 16;
  } else {
    const uint32_t sign = (bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    if (exponent == 0) {
      const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
      return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) {
      x = sign | 0x7f800000u | (mantissa << 13);
    } else {
      x = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
  }
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

void ReferenceRow(const Problem& p, int64_t row, const float* q_row,
                  const float* k_head, const float* v_head, float* out,
                  float sink, float alibi_slope) {
  const int64_t d = p.head_dim;
  const int64_t dv = HeadDimV(p);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // Row `row` sees keys [first, last] of the window, cut to the keys.
  const int64_t diagonal = row + p.seq_k - p.seq_q;
  int64_t first = 0, last = p.seq_k - 1;
  if (p.window_left >= 0)
    first = std::max<int64_t>(first, diagonal - p.window_left);
  if (p.causal) last = std::min(last, diagonal);
  if (p.window_right >= 0) last = std::min(last, diagonal + p.window_right);
  std::vector<double> acc(dv, 0.0);
  if (first <= last) {
    std::vector<double> scores(last - first + 1);
    double max_score = -std::numeric_limits<double>::infinity();
    for (int64_t j = first; j <= last; ++j) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) {
        s += static_cast<double>(q_row[c]) * k_head[j * d + c];
      }
      s *= scale;
      if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
      // ALiBi's bias by the key's distance from the diagonal.
      const double distance = std::abs(static_cast<double>(diagonal - j));
      if (p.alibi) s -= alibi_slope * distance;
      scores[j - first] = s;
      max_score = std::max(max_score, s);
    }
    // A sink joins the softmax's sum, not its output.
    if (p.sinks) max_score = std::max<double>(max_score, sink);
    double sum = p.sinks ? std::exp(sink - max_score) : 0;
    for (double& s : scores) {
      s = std::exp(s - max_score);
      sum += s;
    }
    for (int64_t j = first; j <= last; ++j) {
      const double w = scores[j - first] / sum;
      for (int64_t c = 0; c < dv; ++c) acc[c] += w * v_head[j * dv + c];
    }
  }
  for (int64_t c = 0; c < dv; ++c) out[c] = static_cast<float>(acc[c]);
}

std::vector<float> ReferenceRows(const Problem& p, const std::vector<float>& q,
                                 const std::vector<float>& k,
                                 const std::vector<float>& v,
                                 const std::vector<RowIndex>& rows,
                                 const std::vector<float>& sinks,
                                 const std::vector<float>& alibi_slopes) {
  const int64_t d = p.head_dim;
  const int64_t dv = HeadDimV(p);
  const int64_t group = p.heads / p.kv_heads;
  std::vector<float> out(rows.size() * dv);
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowIndex& r = rows[i];
    const int64_t kv = (r.batch * p.kv_heads + r.head / group) * p.seq_k;
    ReferenceRow(
        p, r.row, &q[((r.batch * p.heads + r.head) * p.seq_q + r.row) * d],
        &k[kv * d], &v[kv * dv], &out[i * dv], p.sinks ? sinks.at(r.head) : 0.f,
        p.alibi ? alibi_slopes.at(r.batch * p.heads + r.head) : 0.f);
  }
  return out;
}

ErrorStats CompareRows(const std::vector<float>& got,
                       const std::vector<float>& want) {
  ErrorStats e;
  double diff2 = 0, want2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = i < got.size() ? got[i] : std::nan("");
    if (!std::isfinite(g)) {
      e.max_abs = e.rel_l2 = std::numeric_limits<double>::infinity();
      return e;
    }
    const double delta = g - want[i];
    e.max_abs = std::max(e.max_abs, std::fabs(delta));
    diff2 += delta * delta;
    want2 += static_cast<double>(want[i]) * want[i];
  }
  e.rel_l2 = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  return e;
}

Tolerance ToleranceFor(DType dtype) {
  // fp16 output rounding alone is ~5e-4 relative and bf16 ~4e-3; kernels
  // that round P to the input type before the PV product add about as much.
  return dtype == DType::kBf16 ? Tolerance{5e-2, 2e-2} : Tolerance{1e-2, 4e-3};
}

Tolerance ToleranceFor(const Problem& problem) {
  // e4m3 keeps 3 mantissa bits: each probability of P V is rounded by up to
  // 2^-4 of itself (FlashAttention 3 and cuDNN round P the same way).
  if (problem.q_fp8) return Tolerance{1e-1, 4e-2};
  return ToleranceFor(problem.dtype);
}

}  // namespace evotune
