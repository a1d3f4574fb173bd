// Dispatch, argument checks, OpenMP partitioning and the scalar reference kernel of host Adam.
// Compiled for baseline x86-64 with -ffp-contract=off (Note [host adam bit identity]).
#include "pstar/optim/host_adam.h"
#include "pstar/optim/float_bits.h"

#include <emmintrin.h>
#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/core/log.h"

namespace pstar::optim {
namespace detail {
namespace {

// Below this many elements a step runs on the calling thread: waking the team costs more.
constexpr int64_t kMinParallelNumel = 1 << 16;
// Each thread's range starts on a multiple of this many elements (a cache line of fp32).
constexpr int64_t kThreadAlign = 64;
// grad_sq_sum's fixed blocking (Note [grad sq sum order]).
constexpr int64_t kSqSumBlock = 1 << 16;

using bits::bf16_to_f32;
using bits::bits_f32;
using bits::f16_to_f32;
using bits::f32_bits;
using bits::f32_to_bf16;
using bits::f32_to_f16;

template <GradType G>
float load_grad(const void* grad, int64_t i) {
  if constexpr (G == GradType::kF32) return static_cast<const float*>(grad)[i];
  if constexpr (G == GradType::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(grad)[i]);
  if constexpr (G == GradType::kF16) return f16_to_f32(static_cast<const uint16_t*>(grad)[i]);
}

enum WdMode { kNoWd, kL2, kDecoupled };

// The reference: every vector kernel computes exactly this, in this order (Note [host adam bit
// identity]). std::fma is correctly rounded everywhere (glibc picks the FMA instruction when the
// CPU has one), so this matches the vector kernels' FMA instructions bit for bit.
template <GradType G, ParamOutType P, int kWd>
void adam_scalar_impl(const AdamCoeffs& c, const AdamSpan& s, int64_t begin, int64_t end) {
  // No __restrict: the destinations are the sources when updating in place.
  const float* master = s.master;
  const float* exp_avg = s.exp_avg;
  const float* exp_avg_sq = s.exp_avg_sq;
  float* master_dst = s.master_dst();
  float* exp_avg_dst = s.exp_avg_dst();
  float* exp_avg_sq_dst = s.exp_avg_sq_dst();
  uint16_t* out = static_cast<uint16_t*>(s.param_out);
  // Element i's new master, moments and parameter copy.
  struct New {
    float p, m, v;
    uint16_t out;
  };
  const auto update = [&](int64_t i) {
    float g = load_grad<G>(s.grad, i) * c.grad_scale;
    float p = master[i];
    if constexpr (kWd == kDecoupled) p = p * c.decay;
    if constexpr (kWd == kL2) g = std::fma(p, c.weight_decay, g);
    const float m = std::fma(g, c.one_minus_beta1, exp_avg[i] * c.beta1);
    const float v = std::fma(c.one_minus_beta2 * g, g, exp_avg_sq[i] * c.beta2);
    const float denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
    p = p + (c.neg_step_size * m) / denom;
    New n{p, m, v, 0};
    if constexpr (P == ParamOutType::kBF16) n.out = f32_to_bf16(p);
    if constexpr (P == ParamOutType::kF16) n.out = f32_to_f16(p);
    return n;
  };
  const auto store = [&](int64_t i, const New& n) {
    master_dst[i] = n.p;
    exp_avg_dst[i] = n.m;
    exp_avg_sq_dst[i] = n.v;
    if constexpr (P != ParamOutType::kNone) out[i] = n.out;
  };
  int64_t i = begin;
  // Note [streaming stores]: a redirected span's outputs go out non-temporally in groups of four
  // (SSE's 16-byte stores, and one 8-byte store of the four parameters), which baseline x86-64
  // has, from the first index where every output is aligned for them.
  const int64_t stream = streaming_begin(s, begin, end, kScalarStreamLanes);
  if (stream >= 0) {
    for (; i < stream; ++i) store(i, update(i));
    for (; i + kScalarStreamLanes <= end; i += kScalarStreamLanes) {
      alignas(16) float pb[kScalarStreamLanes], mb[kScalarStreamLanes], vb[kScalarStreamLanes];
      alignas(8) uint16_t ob[kScalarStreamLanes] = {};
      for (int j = 0; j < kScalarStreamLanes; ++j) {
        const New n = update(i + j);
        pb[j] = n.p;
        mb[j] = n.m;
        vb[j] = n.v;
        ob[j] = n.out;
      }
      _mm_stream_ps(master_dst + i, _mm_load_ps(pb));
      _mm_stream_ps(exp_avg_dst + i, _mm_load_ps(mb));
      _mm_stream_ps(exp_avg_sq_dst + i, _mm_load_ps(vb));
      if constexpr (P != ParamOutType::kNone) {
        long long packed = 0;
        std::memcpy(&packed, ob, sizeof packed);
        _mm_stream_si64(reinterpret_cast<long long*>(out + i), packed);
      }
    }
    _mm_sfence();
  }
  for (; i < end; ++i) store(i, update(i));
}

template <GradType G, ParamOutType P>
void adam_scalar_wd(const AdamCoeffs& c, const AdamSpan& s, int64_t begin, int64_t end) {
  if (!c.has_weight_decay) {
    adam_scalar_impl<G, P, kNoWd>(c, s, begin, end);
  } else if (c.decoupled) {
    adam_scalar_impl<G, P, kDecoupled>(c, s, begin, end);
  } else {
    adam_scalar_impl<G, P, kL2>(c, s, begin, end);
  }
}

template <GradType G>
void adam_scalar_out(const AdamCoeffs& c, const AdamSpan& s, int64_t begin, int64_t end) {
  switch (s.param_out_type) {
    case ParamOutType::kNone:
      return adam_scalar_wd<G, ParamOutType::kNone>(c, s, begin, end);
    case ParamOutType::kBF16:
      return adam_scalar_wd<G, ParamOutType::kBF16>(c, s, begin, end);
    case ParamOutType::kF16:
      return adam_scalar_wd<G, ParamOutType::kF16>(c, s, begin, end);
  }
}

template <GradType G>
double sq_sum_scalar_impl(const void* grad, int64_t begin, int64_t end) {
  double lanes[kSqSumLanes] = {};
  int64_t i = begin;
  for (; i + kSqSumLanes <= end; i += kSqSumLanes) {
    for (int j = 0; j < kSqSumLanes; ++j) {
      const double x = load_grad<G>(grad, i + j);
      lanes[j] += x * x;
    }
  }
  for (int j = 0; i + j < end; ++j) {
    const double x = load_grad<G>(grad, i + j);
    lanes[j] += x * x;
  }
  double sum = 0.0;
  for (double lane : lanes) sum += lane;
  return sum;
}

std::atomic<int> g_isa_override{-1};

Isa resolve_default_isa() {
  const char* env = std::getenv("PSTAR_ADAM_ISA");
  const Isa detected = detected_isa();
  const Isa isa = resolve_isa(env, detected);
  if (env != nullptr && *env != '\0' && std::string(env) != isa_name(isa)) {
    log::warn("PSTAR_ADAM_ISA=", env, " is not supported by this CPU; host Adam uses ",
              isa_name(detected));
  }
  return isa;
}

Isa default_isa() {
  static const Isa isa = resolve_default_isa();
  return isa;
}

Isa active_isa() {
  const int forced = g_isa_override.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : default_isa();
}

using AdamRangeFn = void (*)(const AdamCoeffs&, const AdamSpan&, int64_t, int64_t);
using SqSumBlockFn = double (*)(const void*, GradType, int64_t, int64_t);

AdamRangeFn adam_range_fn(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return adam_range_scalar;
    case Isa::kAvx2:
      return adam_range_avx2;
    case Isa::kAvx512:
      return adam_range_avx512;
  }
  PSTAR_THROW(InternalError, "unknown Isa ", static_cast<int>(isa));
}

SqSumBlockFn sq_sum_block_fn(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return sq_sum_block_scalar;
    case Isa::kAvx2:
      return sq_sum_block_avx2;
    case Isa::kAvx512:
      return sq_sum_block_avx512;
  }
  PSTAR_THROW(InternalError, "unknown Isa ", static_cast<int>(isa));
}

// Worker threads take the caller's MXCSR (flush-to-zero, denormals-are-zero, rounding) for the
// duration of a call, so that the thread an element lands on cannot change its result.
class ScopedMxcsr {
 public:
  explicit ScopedMxcsr(unsigned csr) : saved_(_mm_getcsr()) { _mm_setcsr(csr); }
  ~ScopedMxcsr() { _mm_setcsr(saved_); }
  ScopedMxcsr(const ScopedMxcsr&) = delete;
  ScopedMxcsr& operator=(const ScopedMxcsr&) = delete;

 private:
  unsigned saved_;
};

const char* grad_type_name(GradType type) {
  switch (type) {
    case GradType::kF32:
      return "f32";
    case GradType::kBF16:
      return "bf16";
    case GradType::kF16:
      return "f16";
  }
  return "?";
}

// The enums may come from a cast; reject values outside them before any switch relies on them.
void check_grad_type(GradType type) {
  PSTAR_CHECK(type == GradType::kF32 || type == GradType::kBF16 || type == GradType::kF16,
              ConfigError, "host Adam: invalid grad_type ", static_cast<int>(type));
}

void check_param_out_type(ParamOutType type) {
  PSTAR_CHECK(
      type == ParamOutType::kNone || type == ParamOutType::kBF16 || type == ParamOutType::kF16,
      ConfigError, "host Adam: invalid param_out_type ", static_cast<int>(type));
}

// What host_adam_step and host_adam_hold write, on a span with elements: the redirected state (all
// three outputs or none) and the parameter copy its type asks for. Returns whether the state is
// redirected.
bool check_outputs(const AdamSpan& span) {
  const int outs = (span.master_out != nullptr) + (span.exp_avg_out != nullptr) +
                   (span.exp_avg_sq_out != nullptr);
  PSTAR_CHECK(
      outs == 0 || outs == 3, ConfigError,
      "host Adam: master_out, exp_avg_out and exp_avg_sq_out are set together or not at all");
  if (span.param_out_type == ParamOutType::kNone) {
    PSTAR_CHECK(span.param_out == nullptr, ConfigError,
                "host Adam: param_out is set but param_out_type is kNone");
  } else {
    PSTAR_CHECK(span.param_out != nullptr, ConfigError,
                "host Adam: param_out_type asks for a param copy but param_out is null");
  }
  return outs == 3;
}

}  // namespace

// Note [streaming stores]
// Speculation (Note [speculative adam] in engine/hybrid_adam.h) redirects a chunk's new state into
// a rollback slot, lines this step has not read. An ordinary store to such a line makes the core
// read it first (write-allocate): a redirected bf16 step moves 42 bytes a parameter where in place
// moves 28, and took 1.57x as long as in place (pstar-bench-adam on a 2-core EPYC with AVX-512). On
// a GPU host, where host Adam's memory traffic bounds the step, the 7.46B step that speculated and
// never rolled back took 2.49 s against 1.98 s waiting for the norm (the H200 ledger of
// 2026-11-27). So the vector kernels store a redirected span's outputs with non-temporal stores,
// which write whole lines without reading them (and leave the caches to the next step's work; the
// next reader of those gigabytes, a copy to the device or the next Adam, would not find them
// cached anyway). They need aligned addresses: a kernel stores ordinarily up to the first index
// where every output is aligned for its vector, then streams; it never streams when the outputs are
// not aligned alike (pstar's blocks all start on pages, so its slots always are). The values are
// the same bits; only the way they reach memory changes. Non-temporal stores are weakly ordered, so
// a kernel fences them (sfence) at the end of its range, before the OpenMP barrier or the worker's
// completion makes them visible to another thread. The scalar kernel streams too, four elements at
// a time with SSE's stores (every x86-64 CPU has them), so that no ISA makes a speculated step move
// more bytes than an exact one. Speculation redirects only spans that stream (redirected_streams:
// Note [speculative adam]); PSTAR_ADAM_STREAMING=0 turns the stores off, and with them speculation.
bool resolve_streaming(const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return true;
  const std::string value = env_value;
  if (value == "1") return true;
  if (value == "0") return false;
  PSTAR_THROW(ConfigError, "PSTAR_ADAM_STREAMING='", value,
              "' is not valid: use 1 (the default: a redirected step's outputs are stored "
              "non-temporally) or 0 (ordinary stores, to measure what they cost)");
}

bool streaming_stores() {
  static const bool on = resolve_streaming(std::getenv("PSTAR_ADAM_STREAMING"));
  return on;
}

int64_t streaming_begin(const AdamSpan& s, int64_t begin, int64_t end, int lanes) {
  if (s.master_out == nullptr || lanes <= 0 || !streaming_stores()) return -1;
  const uintptr_t vector_bytes = static_cast<uintptr_t>(lanes) * 4;
  const auto address = [](const void* p, int64_t index, int64_t elem_bytes) {
    return reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(index * elem_bytes);
  };
  const uintptr_t first = address(s.master_out, begin, 4);
  if (first % 4 != 0) return -1;
  const auto behind = static_cast<int64_t>((first % vector_bytes) / 4);
  const int64_t i = behind == 0 ? begin : begin + lanes - behind;
  if (i + lanes > end) return -1;
  if (address(s.exp_avg_out, i, 4) % vector_bytes != 0 ||
      address(s.exp_avg_sq_out, i, 4) % vector_bytes != 0)
    return -1;
  // The parameters' vector holds as many 2-byte values: half the bytes.
  if (s.param_out_type != ParamOutType::kNone &&
      address(s.param_out, i, 2) % (vector_bytes / 2) != 0)
    return -1;
  return i;
}

int stream_lanes(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return kScalarStreamLanes;
    case Isa::kAvx2:
      return 8;
    case Isa::kAvx512:
      return 16;
  }
  return 0;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa detected_isa() {
  __builtin_cpu_init();
  // GCC's checks include the OS's support for saving the AVX and AVX-512 registers (XCR0).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return avx512 ? Isa::kAvx512 : avx2 ? Isa::kAvx2 : Isa::kScalar;
}

Isa resolve_isa(const char* env_value, Isa detected) {
  if (env_value == nullptr || *env_value == '\0') return detected;
  const std::string value = env_value;
  Isa wanted;
  if (value == "scalar") {
    wanted = Isa::kScalar;
  } else if (value == "avx2") {
    wanted = Isa::kAvx2;
  } else if (value == "avx512") {
    wanted = Isa::kAvx512;
  } else {
    PSTAR_THROW(ConfigError, "PSTAR_ADAM_ISA='", value,
                "' is not an ISA; use scalar, avx2 or avx512");
  }
  return static_cast<int>(wanted) > static_cast<int>(detected) ? detected : wanted;
}

Isa set_isa_for_testing(const Isa* isa) {
  if (isa == nullptr) {
    g_isa_override.store(-1, std::memory_order_relaxed);
  } else {
    const int clamped = std::min(static_cast<int>(*isa), static_cast<int>(detected_isa()));
    g_isa_override.store(clamped, std::memory_order_relaxed);
  }
  return active_isa();
}

void adam_range_scalar(const AdamCoeffs& c, const AdamSpan& span, int64_t begin, int64_t end) {
  switch (span.grad_type) {
    case GradType::kF32:
      return adam_scalar_out<GradType::kF32>(c, span, begin, end);
    case GradType::kBF16:
      return adam_scalar_out<GradType::kBF16>(c, span, begin, end);
    case GradType::kF16:
      return adam_scalar_out<GradType::kF16>(c, span, begin, end);
  }
}

double sq_sum_block_scalar(const void* grad, GradType grad_type, int64_t begin, int64_t end) {
  switch (grad_type) {
    case GradType::kF32:
      return sq_sum_scalar_impl<GradType::kF32>(grad, begin, end);
    case GradType::kBF16:
      return sq_sum_scalar_impl<GradType::kBF16>(grad, begin, end);
    case GradType::kF16:
      return sq_sum_scalar_impl<GradType::kF16>(grad, begin, end);
  }
  return 0.0;
}

}  // namespace detail

void host_adam_step(const AdamHyper& hyper, float grad_scale, const AdamSpan& span) {
  // The same checks (and messages) as torch::optim::AdamOptions, plus ours on the buffers.
  detail::check_adam_args(hyper, grad_scale, span.numel, "host Adam");
  detail::check_grad_type(span.grad_type);
  detail::check_param_out_type(span.param_out_type);
  if (span.numel == 0) return;
  PSTAR_CHECK(span.master != nullptr && span.exp_avg != nullptr && span.exp_avg_sq != nullptr &&
                  span.grad != nullptr,
              ConfigError, "host Adam: master, exp_avg, exp_avg_sq and grad must not be null");
  detail::check_outputs(span);

  const detail::AdamCoeffs coeffs = detail::make_adam_coeffs(hyper, grad_scale);
  const detail::AdamRangeFn kernel = detail::adam_range_fn(detail::active_isa());
  const int max_threads = omp_get_max_threads();
  if (span.numel < detail::kMinParallelNumel || max_threads <= 1 || omp_in_parallel()) {
    kernel(coeffs, span, 0, span.numel);
    return;
  }
  // One contiguous range per thread (long streams suit the prefetchers). Elements are independent,
  // so the split does not change any result.
  const unsigned csr = _mm_getcsr();
#pragma omp parallel num_threads(max_threads)
  {
    const detail::ScopedMxcsr scoped(csr);
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    int64_t per_thread = (span.numel + threads - 1) / threads;
    per_thread =
        (per_thread + detail::kThreadAlign - 1) / detail::kThreadAlign * detail::kThreadAlign;
    const int64_t begin = std::min(thread * per_thread, span.numel);
    const int64_t end = std::min(begin + per_thread, span.numel);
    if (begin < end) kernel(coeffs, span, begin, end);
  }
}

void host_adam_hold(const AdamSpan& span) {
  detail::check_param_out_type(span.param_out_type);
  PSTAR_CHECK(span.numel >= 0, ConfigError, "host Adam: numel must be >= 0, got ", span.numel);
  if (span.numel == 0) return;
  const bool redirected = detail::check_outputs(span);
  PSTAR_CHECK(span.master != nullptr &&
                  (!redirected || (span.exp_avg != nullptr && span.exp_avg_sq != nullptr)),
              ConfigError, "host Adam: a held span needs its master (and moments, redirected)");
  const auto n = static_cast<size_t>(span.numel);
  if (redirected) {
    std::memcpy(span.master_out, span.master, n * sizeof(float));
    std::memcpy(span.exp_avg_out, span.exp_avg, n * sizeof(float));
    std::memcpy(span.exp_avg_sq_out, span.exp_avg_sq, n * sizeof(float));
  }
  if (span.param_out_type == ParamOutType::kNone) return;
  // The kernels' rounding (Note [host adam bit identity]): the same bit recipes.
  auto* out = static_cast<uint16_t*>(span.param_out);
  const bool bf16 = span.param_out_type == ParamOutType::kBF16;
  for (size_t i = 0; i < n; ++i)
    out[i] = bf16 ? bits::f32_to_bf16(span.master[i]) : bits::f32_to_f16(span.master[i]);
}

double grad_sq_sum(const void* grad, GradType grad_type, int64_t numel) {
  PSTAR_CHECK(numel >= 0, ConfigError, "grad_sq_sum: numel must be >= 0, got ", numel);
  detail::check_grad_type(grad_type);
  if (numel == 0) return 0.0;
  PSTAR_CHECK(grad != nullptr, ConfigError, "grad_sq_sum: grad (",
              detail::grad_type_name(grad_type), ") must not be null");
  const detail::SqSumBlockFn block_sum = detail::sq_sum_block_fn(detail::active_isa());
  // Note [grad sq sum order]: fixed blocks, each summed by the fixed lane recipe, then the block
  // sums added in block order; threads only decide who computes which block.
  const int64_t blocks = (numel + detail::kSqSumBlock - 1) / detail::kSqSumBlock;
  if (blocks == 1) return block_sum(grad, grad_type, 0, numel);
  std::vector<double> partial(static_cast<size_t>(blocks));
  const unsigned csr = _mm_getcsr();
  const bool parallel = omp_get_max_threads() > 1 && !omp_in_parallel();
#pragma omp parallel if (parallel)
  {
    const detail::ScopedMxcsr scoped(csr);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * detail::kSqSumBlock;
      const int64_t end = std::min(begin + detail::kSqSumBlock, numel);
      partial[static_cast<size_t>(b)] = block_sum(grad, grad_type, begin, end);
    }
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

// Each thread's range begins on a multiple of kThreadAlign elements, a whole number of vectors of
// every output: where element 0 streams, every range does from its first element.
bool redirected_streams(const AdamSpan& span) {
  return span.numel > 0 && detail::streaming_begin(span, 0, span.numel,
                                                   detail::stream_lanes(detail::active_isa())) >= 0;
}

const char* host_adam_isa() { return detail::isa_name(detail::active_isa()); }

}  // namespace pstar::optim
