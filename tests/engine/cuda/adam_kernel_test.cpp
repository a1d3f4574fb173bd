// The CUDA Adam kernel against optim::host_adam_step, bit for bit (Note [cuda adam bit identity]):
// every gradient dtype, parameter copy and weight decay, several steps, sizes that are not
// multiples of the block or the vector width, both the vectorized and the one-element path, the
// gradient in the parameter copy's buffer, non-finite gradients, and the raw-stream overload.
// Needs a GPU; skipped without.
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "pstar/base/error.h"
#include "pstar/cuda/adam.h"
#include "pstar/cuda/memory.h"
#include "pstar/cuda/stream.h"
#include "pstar/optim/host_adam.h"

namespace pstar::cuda::test {
namespace {

using optim::GradType;
using optim::ParamOutType;

// One span on the host (run by host Adam) and its twin on the device, `offset` elements into
// device blocks (offset 1 misaligns every buffer for the vectorized path).
class SpanPair {
 public:
  SpanPair(DeviceArena& arena, const AdamCase& c, int64_t n, int64_t offset, bool alias,
           std::mt19937& rng)
      : c_(c), n_(n), offset_(offset), alias_(alias) {
    state_ = random_state(n, rng);
    out_.assign(static_cast<size_t>(n), 0);
    const int64_t padded = n + offset;
    master_ = arena.allocate(padded * 4);
    exp_avg_ = arena.allocate(padded * 4);
    exp_avg_sq_ = arena.allocate(padded * 4);
    grad_ = arena.allocate(padded * static_cast<int64_t>(grad_elem_bytes(c.grad)));
    out_dev_ = arena.allocate(padded * 2);
    upload(state_.master, master_);
    upload(state_.exp_avg, exp_avg_);
    upload(state_.exp_avg_sq, exp_avg_sq_);
    copy_h2d_async(at(out_dev_, 2), out_.data(), n * 2, stream_);
    stream_.synchronize();
  }

  // One step on both sides with a new gradient.
  void step(const optim::AdamHyper& hyper, const std::vector<uint8_t>& grad) {
    const auto bytes = static_cast<int64_t>(grad.size());
    if (alias_) {
      std::memcpy(out_.data(), grad.data(), grad.size());
      copy_h2d_async(at(out_dev_, 2), grad.data(), bytes, stream_);
    } else {
      host_grad_ = grad;
      copy_h2d_async(at(grad_, static_cast<int64_t>(grad_elem_bytes(c_.grad))), grad.data(), bytes,
                     stream_);
    }
    optim::AdamSpan host;
    host.master = state_.master.data();
    host.exp_avg = state_.exp_avg.data();
    host.exp_avg_sq = state_.exp_avg_sq.data();
    host.grad = alias_ ? static_cast<const void*>(out_.data()) : host_grad_.data();
    host.grad_type = c_.grad;
    host.param_out = c_.out == ParamOutType::kNone ? nullptr : out_.data();
    host.param_out_type = c_.out;
    host.numel = n_;
    optim::host_adam_step(hyper, kGradMultiplier, host);
    const AdamSpanDevice span = device_span();
    EXPECT_EQ(detail::adam_vectorized(span), offset_ == 0);
    adam_step(span, hyper, kGradMultiplier, stream_);
  }

  // Downloads the device's state and compares it with the host's.
  void expect_equal(const std::string& what) {
    std::vector<float> master(static_cast<size_t>(n_)), m(master.size()), v(master.size());
    std::vector<uint16_t> out(master.size());
    copy_d2h_async(master.data(), at(master_, 4), n_ * 4, stream_);
    copy_d2h_async(m.data(), at(exp_avg_, 4), n_ * 4, stream_);
    copy_d2h_async(v.data(), at(exp_avg_sq_, 4), n_ * 4, stream_);
    copy_d2h_async(out.data(), at(out_dev_, 2), n_ * 2, stream_);
    stream_.synchronize();
    EXPECT_EQ(count_f32_mismatches(state_.master, master.data(), "master" + what), 0);
    EXPECT_EQ(count_f32_mismatches(state_.exp_avg, m.data(), "exp_avg" + what), 0);
    EXPECT_EQ(count_f32_mismatches(state_.exp_avg_sq, v.data(), "exp_avg_sq" + what), 0);
    if (c_.out != ParamOutType::kNone) {
      EXPECT_EQ(count_u16_mismatches(out_, out.data(), c_.out, "param_out" + what), 0);
    }
  }

 private:
  void* at(const DeviceBlock& block, int64_t elem_bytes) const {
    return static_cast<char*>(block.data()) + offset_ * elem_bytes;
  }

  void upload(const std::vector<float>& host, const DeviceBlock& block) {
    copy_h2d_async(at(block, 4), host.data(), n_ * 4, stream_);
  }

  AdamSpanDevice device_span() const {
    AdamSpanDevice s;
    s.master = static_cast<float*>(at(master_, 4));
    s.exp_avg = static_cast<float*>(at(exp_avg_, 4));
    s.exp_avg_sq = static_cast<float*>(at(exp_avg_sq_, 4));
    s.grad = alias_ ? at(out_dev_, 2) : at(grad_, static_cast<int64_t>(grad_elem_bytes(c_.grad)));
    s.grad_type = c_.grad;
    s.param_out = c_.out == ParamOutType::kNone ? nullptr : at(out_dev_, 2);
    s.param_out_type = c_.out;
    s.numel = n_;
    return s;
  }

  AdamCase c_;
  int64_t n_, offset_;
  bool alias_;
  Stream stream_;
  AdamInputs state_;
  std::vector<uint8_t> host_grad_;
  std::vector<uint16_t> out_;
  DeviceBlock master_, exp_avg_, exp_avg_sq_, grad_, out_dev_;
};

class AdamKernelTest : public CudaDeviceParamTest<AdamCase> {};

TEST_P(AdamKernelTest, MatchesHostAdamBitForBit) {
  const AdamCase c = GetParam();
  DeviceArena arena(256 << 20);
  // 1..3: below the vector width; 1027: a block and a vector tail; 300001: many blocks, odd.
  for (int64_t n : {1, 3, 4, 1027, 300001}) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE("numel " + std::to_string(n) + ", offset " + std::to_string(offset));
      std::mt19937 rng(static_cast<uint32_t>(n * 2 + offset));
      SpanPair pair(arena, c, n, offset, /*alias=*/false, rng);
      for (int64_t step : step_sequence()) {
        pair.step(hyper_for(c.decay, step), random_grad(c.grad, n, rng));
        pair.expect_equal(" after step " + std::to_string(step));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, AdamKernelTest, ::testing::ValuesIn(all_adam_cases()),
                         case_name);

class AdamKernelSpanTest : public CudaDeviceTest {};

// Param/grad reuse: the bf16/fp16 gradient arrives in the buffer the new parameter copy goes to.
TEST_F(AdamKernelSpanTest, GradientInTheParamCopysBufferMatchesHostAdam) {
  DeviceArena arena(64 << 20);
  for (const AdamCase c : {AdamCase{GradType::kBF16, ParamOutType::kBF16, Decay::kDecoupled},
                           AdamCase{GradType::kF16, ParamOutType::kF16, Decay::kL2}}) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(std::string(name(c.grad)) + ", offset " + std::to_string(offset));
      std::mt19937 rng(static_cast<uint32_t>(17 + offset));
      SpanPair pair(arena, c, 100003, offset, /*alias=*/true, rng);
      for (int64_t step : step_sequence()) {
        pair.step(hyper_for(c.decay, step), random_grad(c.grad, 100003, rng));
        pair.expect_equal(" after step " + std::to_string(step));
      }
    }
  }
}

// More elements than one grid of the kernel covers (4096 blocks of 256 threads, x4 vectorized),
// so both kernels loop.
TEST_F(AdamKernelSpanTest, SpansLargerThanOneGridMatchHostAdam) {
  DeviceArena arena(512 << 20);
  const AdamCase c{GradType::kBF16, ParamOutType::kBF16, Decay::kDecoupled};
  const int64_t n = 4 * 4096 * 256 + 5;
  for (int64_t offset : {0, 1}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    std::mt19937 rng(23);
    SpanPair pair(arena, c, n, offset, /*alias=*/false, rng);
    for (int64_t step : {int64_t{1}, int64_t{2}}) {
      pair.step(hyper_for(c.decay, step), random_grad(c.grad, n, rng));
    }
    pair.expect_equal(" after 2 steps");
  }
}

// Infinite and NaN gradients: NaN and infinity where host Adam has them, the same finite values
// elsewhere; NaN payloads may differ (Note [cuda adam bit identity]), bf16 copies of NaN may not.
TEST_F(AdamKernelSpanTest, NonFiniteGradientsGiveWhatHostAdamGives) {
  DeviceArena arena(16 << 20);
  for (const AdamCase c : {AdamCase{GradType::kF32, ParamOutType::kBF16, Decay::kDecoupled},
                           AdamCase{GradType::kF16, ParamOutType::kF16, Decay::kNone}}) {
    SCOPED_TRACE(name(c.grad));
    const int64_t n = 4099;
    std::mt19937 rng(29);
    SpanPair pair(arena, c, n, 0, /*alias=*/false, rng);
    std::vector<uint8_t> grad = random_grad(c.grad, n, rng);
    for (int64_t i = 0; i < n; i += 37) {
      if (c.grad == GradType::kF32) {
        const float bad[] = {std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
        std::memcpy(grad.data() + 4 * i, &bad[(i / 37) % 3], 4);
      } else {
        const uint16_t bad[] = {0x7C00, 0xFC00, 0x7E01};
        std::memcpy(grad.data() + 2 * i, &bad[(i / 37) % 3], 2);
      }
    }
    pair.step(hyper_for(c.decay, 1), grad);
    pair.expect_equal(" after a step with non-finite gradients");
  }
}

// The raw-stream overload (a cudaStream_t, e.g. LibTorch's current stream) gives the Stream&
// overload's bits, on another Stream's handle and on the legacy default stream (nullptr).
TEST_F(AdamKernelSpanTest, RawStreamOverloadGivesTheSameBits) {
  DeviceArena arena(64 << 20);
  const AdamCase c{GradType::kBF16, ParamOutType::kBF16, Decay::kDecoupled};
  const int64_t n = 100003;
  std::mt19937 rng(31);
  const AdamInputs state = random_state(n, rng);
  std::vector<std::vector<uint8_t>> grads;
  for (int s = 0; s < 3; ++s) grads.push_back(random_grad(c.grad, n, rng));
  Stream stream;
  Stream other;
  // One set of buffers per way of naming the stream: 0 Stream&, 1 other.native(), 2 nullptr.
  struct Buffers {
    DeviceBlock master, exp_avg, exp_avg_sq, grad, out;
    AdamSpanDevice span;
  };
  std::vector<Buffers> sets(3);
  for (Buffers& b : sets) {
    b.master = arena.allocate(n * 4);
    b.exp_avg = arena.allocate(n * 4);
    b.exp_avg_sq = arena.allocate(n * 4);
    b.grad = arena.allocate(n * 2);
    b.out = arena.allocate(n * 2);
    copy_h2d_async(b.master.data(), state.master.data(), n * 4, stream);
    copy_h2d_async(b.exp_avg.data(), state.exp_avg.data(), n * 4, stream);
    copy_h2d_async(b.exp_avg_sq.data(), state.exp_avg_sq.data(), n * 4, stream);
    b.span.master = static_cast<float*>(b.master.data());
    b.span.exp_avg = static_cast<float*>(b.exp_avg.data());
    b.span.exp_avg_sq = static_cast<float*>(b.exp_avg_sq.data());
    b.span.grad = b.grad.data();
    b.span.grad_type = c.grad;
    b.span.param_out = b.out.data();
    b.span.param_out_type = c.out;
    b.span.numel = n;
  }
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<uint8_t>& grad = grads[static_cast<size_t>(step - 1)];
    for (Buffers& b : sets) copy_h2d_async(b.grad.data(), grad.data(), n * 2, stream);
    // The uploads are on a non-blocking stream, which the other two do not wait for.
    stream.synchronize();
    const optim::AdamHyper hyper = hyper_for(c.decay, step);
    adam_step(sets[0].span, hyper, kGradMultiplier, stream);
    adam_step(sets[1].span, hyper, kGradMultiplier, other.native());
    adam_step(sets[2].span, hyper, kGradMultiplier, nullptr);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    other.synchronize();
    stream.synchronize();
  }
  auto download = [&](const Buffers& b) {
    AdamInputs out;
    for (auto [dst, src] : {std::pair{&out.master, &b.master}, std::pair{&out.exp_avg, &b.exp_avg},
                            std::pair{&out.exp_avg_sq, &b.exp_avg_sq}}) {
      dst->resize(static_cast<size_t>(n));
      copy_d2h_async(dst->data(), src->data(), n * 4, stream);
    }
    std::vector<uint16_t> copy(static_cast<size_t>(n));
    copy_d2h_async(copy.data(), b.out.data(), n * 2, stream);
    stream.synchronize();
    return std::pair{out, copy};
  };
  const auto [expected, expected_copy] = download(sets[0]);
  for (size_t k : {size_t{1}, size_t{2}}) {
    SCOPED_TRACE(k == 1 ? "another Stream's handle" : "the legacy default stream");
    const auto [actual, actual_copy] = download(sets[k]);
    EXPECT_EQ(count_f32_mismatches(expected.master, actual.master.data(), "master"), 0);
    EXPECT_EQ(count_f32_mismatches(expected.exp_avg, actual.exp_avg.data(), "exp_avg"), 0);
    EXPECT_EQ(count_f32_mismatches(expected.exp_avg_sq, actual.exp_avg_sq.data(), "exp_avg_sq"), 0);
    EXPECT_EQ(count_u16_mismatches(expected_copy, actual_copy.data(), c.out, "param_out"), 0);
  }
}

TEST_F(AdamKernelSpanTest, RejectsBadSpans) {
  Stream stream;
  DeviceArena arena(1 << 20);
  DeviceBlock block = arena.allocate(4096);
  auto* f = static_cast<float*>(block.data());
  AdamSpanDevice span;
  span.master = f;
  span.exp_avg = f + 256;
  span.exp_avg_sq = f + 512;
  span.grad = f + 768;
  span.numel = 16;
  optim::AdamHyper hyper;
  EXPECT_NO_THROW(adam_step(span, hyper, 1.0f, stream));
  AdamSpanDevice misaligned = span;
  misaligned.master = reinterpret_cast<float*>(static_cast<char*>(block.data()) + 2);
  EXPECT_THROW(adam_step(misaligned, hyper, 1.0f, stream), ConfigError);
  AdamSpanDevice no_out = span;
  no_out.param_out_type = ParamOutType::kBF16;
  EXPECT_THROW(adam_step(no_out, hyper, 1.0f, stream), ConfigError);
  hyper.beta1 = 1.0f;
  EXPECT_THROW(adam_step(span, hyper, 1.0f, stream), ConfigError);
  stream.synchronize();
}

}  // namespace
}  // namespace pstar::cuda::test
