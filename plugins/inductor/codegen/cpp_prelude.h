// torchkiln inductor: helpers included at the top of every generated C++ translation unit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

// libmvec provides SIMD versions of these; declaring them lets gcc vectorize loops that call them.
extern "C" {
#define KILN_SIMD_DECL(ret, name, ...) __attribute__((__simd__("notinbranch"))) ret name(__VA_ARGS__) noexcept;
KILN_SIMD_DECL(float, expf, float) KILN_SIMD_DECL(float, logf, float) KILN_SIMD_DECL(float, erff, float)
KILN_SIMD_DECL(float, erfcf, float) KILN_SIMD_DECL(float, tanhf, float) KILN_SIMD_DECL(float, sinf, float)
KILN_SIMD_DECL(float, cosf, float) KILN_SIMD_DECL(float, tanf, float) KILN_SIMD_DECL(float, expm1f, float)
KILN_SIMD_DECL(float, log1pf, float) KILN_SIMD_DECL(float, log2f, float) KILN_SIMD_DECL(float, log10f, float)
KILN_SIMD_DECL(float, exp2f, float) KILN_SIMD_DECL(float, asinf, float) KILN_SIMD_DECL(float, acosf, float)
KILN_SIMD_DECL(float, atanf, float) KILN_SIMD_DECL(float, sinhf, float) KILN_SIMD_DECL(float, coshf, float)
KILN_SIMD_DECL(float, asinhf, float) KILN_SIMD_DECL(float, acoshf, float) KILN_SIMD_DECL(float, atanhf, float)
KILN_SIMD_DECL(double, exp, double) KILN_SIMD_DECL(double, log, double) KILN_SIMD_DECL(double, erf, double)
KILN_SIMD_DECL(double, tanh, double) KILN_SIMD_DECL(double, sin, double) KILN_SIMD_DECL(double, cos, double)
KILN_SIMD_DECL(float, powf, float, float) KILN_SIMD_DECL(double, pow, double, double)
#undef KILN_SIMD_DECL
}

typedef uint16_t kiln_half_bits;

static inline float kiln_bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t kiln_float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
static inline float kiln_f16_to_float(uint16_t v) {
  _Float16 h;
  std::memcpy(&h, &v, 2);
  return static_cast<float>(h);
}
static inline uint16_t kiln_float_to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t v;
  std::memcpy(&v, &h, 2);
  return v;
}
static inline float kiln_round_bf16(float f) { return kiln_bf16_to_float(kiln_float_to_bf16(f)); }
static inline float kiln_round_f16(float f) { return kiln_f16_to_float(kiln_float_to_f16(f)); }

// NaN-propagating max/min, as torch.maximum/amax.
template <typename T> static inline T kiln_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
  return a > b ? a : b;
}
template <typename T> static inline T kiln_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return a; if (b != b) return b; }
  return a < b ? a : b;
}
template <typename T> static inline T kiln_floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::floor(a / b);
  } else {
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
  }
}
template <typename T> static inline T kiln_remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}
template <typename T> static inline T kiln_ipow(T base, T exp) {
  if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  T result = 1;
  while (exp) { if (exp & 1) result *= base; base *= base; exp >>= 1; }
  return result;
}
template <typename T> static inline T kiln_sign(T x) {
  if constexpr (std::is_floating_point_v<T>) return x > 0 ? T(1) : (x < 0 ? T(-1) : x);
  else return static_cast<T>((T(0) < x) - (x < T(0)));
}
template <typename T> static inline T kiln_sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }

static inline double kiln_erfinv(double y) {
  if (y <= -1.0) return y == -1.0 ? -std::numeric_limits<double>::infinity() : NAN;
  if (y >= 1.0) return y == 1.0 ? std::numeric_limits<double>::infinity() : NAN;
  // Giles' approximation, then Newton steps on erf.
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 6.25) {
    w -= 3.125;
    x = -3.6444120640178196996e-21; x = -1.685059138182016589e-19 + x * w;
    x = 1.2858480715256400167e-18 + x * w; x = 1.115787767802518096e-17 + x * w;
    x = -1.333171662854620906e-16 + x * w; x = 2.0972767875968561637e-17 + x * w;
    x = 6.6376381343583238325e-15 + x * w; x = -4.0545662729752068639e-14 + x * w;
    x = -8.1519341976054721522e-14 + x * w; x = 2.6335093153082322977e-12 + x * w;
    x = -1.2975133253453532498e-11 + x * w; x = -5.4154120542946279317e-11 + x * w;
    x = 1.051212273321532285e-09 + x * w; x = -4.1126339803469836976e-09 + x * w;
    x = -2.9070369957882005086e-08 + x * w; x = 4.2347877827932403518e-07 + x * w;
    x = -1.3654692000834678645e-06 + x * w; x = -1.3882523362786468719e-05 + x * w;
    x = 0.0001867342080340571352 + x * w; x = -0.00074070253416626697512 + x * w;
    x = -0.0060336708714301490533 + x * w; x = 0.24015818242558961693 + x * w;
    x = 1.6536545626831027356 + x * w;
  } else if (w < 16.0) {
    w = std::sqrt(w) - 3.25;
    x = 2.2137376921775787049e-09; x = 9.0756561938885390979e-08 + x * w;
    x = -2.7517406297064545428e-07 + x * w; x = 1.8239629214389227755e-08 + x * w;
    x = 1.5027403968909827627e-06 + x * w; x = -4.013867526981545969e-06 + x * w;
    x = 2.9234449089955446044e-06 + x * w; x = 1.2475304481671778723e-05 + x * w;
    x = -4.7318229009055733981e-05 + x * w; x = 6.8284851459573175448e-05 + x * w;
    x = 2.4031110387097893999e-05 + x * w; x = -0.0003550375203628474796 + x * w;
    x = 0.00095328937973738049703 + x * w; x = -0.0016882755560235047313 + x * w;
    x = 0.0024914420961078508066 + x * w; x = -0.0037512085075692412107 + x * w;
    x = 0.005370914553590063617 + x * w; x = 1.0052589676941592334 + x * w;
    x = 3.0838856104922207635 + x * w;
  } else {
    w = std::sqrt(w) - 5.0;
    x = -2.7109920616438573243e-11; x = -2.5556418169965252055e-10 + x * w;
    x = 1.5076572693500548083e-09 + x * w; x = -3.7894654401267369937e-09 + x * w;
    x = 7.6157012080783393804e-09 + x * w; x = -1.4960026627149240478e-08 + x * w;
    x = 2.9147953450901080826e-08 + x * w; x = -6.7711997758452339498e-08 + x * w;
    x = 2.2900482228026654717e-07 + x * w; x = -9.9298272942317002539e-07 + x * w;
    x = 4.5260625972231537039e-06 + x * w; x = -1.9681778105531670567e-05 + x * w;
    x = 7.5995277030017761139e-05 + x * w; x = -0.00021503011930044477347 + x * w;
    x = -0.00013871931833623122026 + x * w; x = 1.0103004648645343977 + x * w;
    x = 4.8499064014085844221 + x * w;
  }
  x *= y;
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (1.1283791670955126 * std::exp(-x * x));
  return x;
}

// Counter-based random numbers: the same (seed, offset) always gives the same value.
static inline uint64_t kiln_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static inline double kiln_rand(int64_t seed, int64_t offset) {
  uint64_t z = kiln_mix64(static_cast<uint64_t>(seed) + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(offset) + 1));
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}
static inline double kiln_randn(int64_t seed, int64_t offset) {
  double u1 = kiln_rand(seed, 2 * offset), u2 = kiln_rand(seed, 2 * offset + 1);
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
}

// Welford's running (mean, m2, count), and Chan's combination of two partial states.
template <typename T> static inline void kiln_welford_update(T& mean, T& m2, T& weight, T x) {
  weight += T(1);
  T delta = x - mean;
  mean += delta / weight;
  m2 += delta * (x - mean);
}
// the same step when the caller already knows 1 / count (shared by all lanes of a block)
template <typename T> static inline void kiln_welford_update_rw(T& mean, T& m2, T x, T rw) {
  T delta = x - mean;
  mean += delta * rw;
  m2 += delta * (x - mean);
}
template <typename T>
static inline void kiln_welford_combine(T& mean, T& m2, T& weight, T omean, T om2, T oweight) {
  T total = weight + oweight;
  if (oweight == T(0)) return;
  T delta = omean - mean;
  T frac = oweight / total;
  mean += delta * frac;
  m2 += om2 + delta * delta * weight * frac;
  weight = total;
}
// The total of L lanes added pairwise, halving the lanes each round (contiguous halves of a
// static size, so each round vectorizes): error ~log2(L), not L.
template <typename T, int L> static inline T kiln_pairwise_total(const T (&lanes)[L]) {
  if constexpr (L == 1) {
    return lanes[0];
  } else {
    constexpr int K = L - L / 2;  // lanes k < L / 2 take lane k + K
    T half[K];
    for (int k = 0; k < K; ++k) half[k] = k < L / 2 ? lanes[k] + lanes[k + K] : lanes[k];
    return kiln_pairwise_total(half);
  }
}
// Merge the L lane states of a vectorized block loop, which all saw `count` elements, into
// (out_mean, out_m2, out_weight). Equal weights make Chan's pairwise combination closed-form:
// the mean is the lanes' average and m2 adds count * the spread of the lane means, with no
// division per lane (the pairwise merge was ~7% of a layer-norm kernel). NaN/inf propagate.
template <typename T, int L>
static inline void kiln_welford_merge_lanes(const T (&mean)[L], const T (&m2)[L], T count,
                                            T& out_mean, T& out_m2, T& out_weight) {
  T avg = kiln_pairwise_total(mean) / T(L), m2_sum = kiln_pairwise_total(m2), spread = 0;
  for (int l = 0; l < L; ++l) { T d = mean[l] - avg; spread += d * d; }
  out_mean = avg;
  out_m2 = m2_sum + spread * count;
  out_weight = count * T(L);
}
// Blocked summation (codegen/cpp_blocked.py): a lane's accumulator takes a block of steps,
// then moves into the lane's double total and restarts. Each float partial sum holds one block's
// terms and the totals round like doubles, so the error no longer grows with the length. Only the
// first n lanes are live (a column kernel's last block of outputs may fill fewer).
template <typename T, int L>
static inline void kiln_block_flush(T (&acc)[L], double (&total)[L], int64_t n) {
  for (int64_t l = 0; l < n; ++l) { total[l] += acc[l]; acc[l] = T(0); }
}
template <typename T, int L>
static inline void kiln_block_finish(T (&acc)[L], const double (&total)[L], int64_t n) {
  for (int64_t l = 0; l < n; ++l) acc[l] = static_cast<T>(total[l] + acc[l]);
}
// Chan's combination of n lane states that hold `w` elements each into n that hold `tw` each:
// the weights are shared by the lanes, so there is one division per call, not per lane.
template <typename T, typename S, int L>
static inline void kiln_welford_combine_lanes(T (&tmean)[L], T (&tm2)[L], T& tw,
                                              const S (&mean)[L], const S (&m2)[L], S w,
                                              int64_t n) {
  if (w == S(0)) return;
  T total = tw + T(w), frac = T(w) / total, cross = tw * frac;
  for (int64_t l = 0; l < n; ++l) {
    T delta = T(mean[l]) - tmean[l];
    tmean[l] += delta * frac;
    tm2[l] += T(m2[l]) + delta * delta * cross;
  }
  tw = total;
}
template <typename T, int L>
static inline void kiln_block_welford_flush(T (&mean)[L], T (&m2)[L], T& w, double (&tmean)[L],
                                            double (&tm2)[L], double& tw, int64_t n) {
  kiln_welford_combine_lanes(tmean, tm2, tw, mean, m2, w, n);
  for (int64_t l = 0; l < n; ++l) { mean[l] = T(0); m2[l] = T(0); }
  w = T(0);
}
template <typename T, int L>
static inline void kiln_block_welford_finish(T (&mean)[L], T (&m2)[L], T& w, double (&tmean)[L],
                                             double (&tm2)[L], double& tw, int64_t n) {
  kiln_welford_combine_lanes(tmean, tm2, tw, mean, m2, w, n);
  for (int64_t l = 0; l < n; ++l) { mean[l] = T(tmean[l]); m2[l] = T(tm2[l]); }
  w = T(tw);
}
// arg-reductions: NaN counts as the largest (and smallest) value; ties keep the first index.
template <typename T> static inline void kiln_argmax_update(T& val, int64_t& idx, T v, int64_t i) {
  bool take;
  if constexpr (std::is_floating_point_v<T>) {
    if (val != val) take = (v != v) && i < idx;
    else if (v != v) take = true;
    else take = v > val || (v == val && i < idx);
  } else {
    take = v > val || (v == val && i < idx);
  }
  if (take) { val = v; idx = i; }
}
template <typename T> static inline void kiln_argmin_update(T& val, int64_t& idx, T v, int64_t i) {
  bool take;
  if constexpr (std::is_floating_point_v<T>) {
    if (val != val) take = (v != v) && i < idx;
    else if (v != v) take = true;
    else take = v < val || (v == val && i < idx);
  } else {
    take = v < val || (v == val && i < idx);
  }
  if (take) { val = v; idx = i; }
}

// erf: a rational approximation for float (at most 4.5e-7 from the exact value, branch-free so
// loops vectorize); the library function for double. erf is odd: it is computed on |x| clamped
// to 4 (NaN passes through) and the sign copied back, one compare and blend where clamping
// both ends took four compares and two blends. Both polynomials in y = x^2 are evaluated by
// Estrin's scheme: independent pairs instead of one Horner chain of dependent FMAs, which
// left the GELU + layer-norm loop waiting on FMA latency.
static inline float kiln_erf(float x) {
  float a = std::fabs(x);
  float c = a > 4.f ? 4.f : a;
  float y = c * c;
  float y2 = y * y;
  float y4 = y2 * y2;
  float p = (-1.60960333262415e-02f - 2.95459980854025e-03f * y)
          + y2 * (-7.34990630326855e-04f - 5.69250639462346e-05f * y)
          + y4 * ((-2.10102402082508e-06f + 2.77068142495902e-08f * y) - 2.72614225801306e-10f * y2);
  float q = (-1.42647390514189e-02f - 7.37332916720468e-03f * y)
          + y2 * (-1.68282697438203e-03f - 2.13374055278905e-04f * y)
          - 1.45660718464996e-05f * y4;
  return std::copysign(c * p / q, x);
}
static inline double kiln_erf(double x) { return std::erf(x); }
