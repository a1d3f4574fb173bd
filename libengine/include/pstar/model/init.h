// The built-in families' initial values: a counter-based generator, so that every element is a
// function of the seed, its parameter's name and its index (Note [counter-based init]).
//
// Note [counter-based init]
// GPT and Llama parameters start as Hugging Face's do (normal weights, zero biases, unit norms),
// but their random numbers no longer come from LibTorch's generator drawn in construction order:
// that ran on one thread (about 86 M values/s, the largest part of a 355M model's set-up on the
// development machines, issue 35) and tied the values to the order of the draws. Element i of the
// parameter called NAME, for training.seed SEED, is instead
//
//   z = Box-Muller(Philox4x32-10(key = SEED, counter = (i / 4, fnv1a64(NAME))))[i % 4]
//
// times the parameter's standard deviation: one Philox block (four 32-bit words) gives two pairs of
// uniforms, and each pair two normals (radius sqrt(-2 ln u1), angle 2 pi u2; u1 = (v + 1/2) / 2^31
// from the first word's top 31 bits v, u2 from the second word's top 24 bits). The logarithm, sine
// and cosine are computed here, in fp32, from +, -, *, / and sqrt alone (no libm, no fused
// multiply-adds: the kernel is compiled with -ffp-contract=off, once per instruction set, the
// best the CPU has chosen at run time), so the bits are the same on every x86-64 CPU, whichever
// instruction set and vector width computed which element. A value is then the same whatever thread
// count writes it, whichever engine holds it (chunks or plain tensors), whatever the budget, the
// device or the number of ranks (each rank writes only the chunks it owns, with the numbers every
// rank would write), and whether the model was built unit by unit or at once. The numbers for a
// given seed changed once, with this note (docs/training.md#determinism).
//
// Accuracy: within 1e-6 (1 + |z|) of the same formula in float64 (ln u1 from 1 - u1 where u1 is
// near 1, so small radii keep their precision); the largest |z| is sqrt(-2 ln 2^-32) = 6.66 (a
// normal value beyond it has probability 3e-11). The tests compare
// the normals with a float64 computation from the same Philox words, and their moments and
// independence with the normal distribution's.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pstar/optim/host_adam.h"  // ParamOutType: the 16-bit copy's type

namespace pstar::model {

// How one parameter of a built-in family starts.
struct ParameterInit {
  enum class Kind : uint8_t { kNormal, kZeros, kOnes };
  Kind kind = Kind::kZeros;
  double std = 0;  // kNormal: N(0, std^2)
  // Elements [zero_begin, zero_end) are 0 whatever the kind: an embedding's padding row, which
  // Hugging Face's _init_weights zeroes (nn.Embedding's padding_idx).
  int64_t zero_begin = 0, zero_end = 0;
};

struct ModelShape;

// How the parameter `name` (its Hugging Face name) of a built-in family starts, as Hugging Face's
// _init_weights does: N(0, 0.02) weights (GPT-2's residual projections N(0, 0.02 / sqrt(2 *
// layers))), zero biases, unit norm weights. InternalError for a name the family does not have.
ParameterInit parameter_init(const ModelShape& shape, const std::string& name);

// The 64-bit stream a parameter's name selects (FNV-1a of its bytes).
uint64_t init_stream(std::string_view name);

// The Philox4x32-10 block `block` of (seed, stream): the four words Box-Muller turns into elements
// 4 * block .. 4 * block + 3 (tests compare them with an independent Philox).
std::array<uint32_t, 4> init_philox_block(uint64_t seed, uint64_t stream, uint64_t block);

// The standard normals of elements [begin, end) of (seed, stream), into out[0 .. end - begin).
void init_standard_normals(uint64_t seed, uint64_t stream, int64_t begin, int64_t end, float* out);

// One parameter's values to write: elements [begin, end) of it, into `f32` (fp32, may be null) and
// `low` (the 16-bit copy a bf16/fp16 chunk computes with, rounded to nearest even from the fp32
// value; null with low_type kNone). Both point at element `begin`.
struct InitWrite {
  ParameterInit init;
  uint64_t stream = 0;
  int64_t begin = 0, end = 0;
  float* f32 = nullptr;
  void* low = nullptr;
  optim::ParamOutType low_type = optim::ParamOutType::kNone;
  int64_t numel() const { return end - begin; }
};

// Writes every write's values, split over LibTorch's intra-op threads in pieces of at most
// kInitPiece elements. The bits do not depend on the split. `on_done`, when given, is called with
// the bytes written as pieces finish (from any of the threads). Returns how many threads took part
// (tests).
// 2^20 elements: 4 MiB of fp32, so that two threads rarely share a huge page (Note [huge pages for
// payloads]; a fault on one page makes the other wait).
inline constexpr int64_t kInitPiece = int64_t{1} << 20;

// "avx512", "avx2" or "scalar": the kernel the generator runs, the best this CPU has unless the
// environment variable PSTAR_INIT_ISA (scalar|avx2|avx512, read once) asks for a lower one. Every
// one writes the same bits (Note [counter-based init]); they differ in speed.
const char* init_isa();

namespace detail {
// Tests only: makes later writes use `isa` (clamped to the CPU's), or the default again for null.
// Returns the instruction set now in use. Not thread-safe against running writes.
optim::detail::Isa set_init_isa_for_testing(const optim::detail::Isa* isa);
}  // namespace detail
int write_init(uint64_t seed, const std::vector<InitWrite>& writes,
               const std::function<void(int64_t bytes)>& on_done = nullptr);

}  // namespace pstar::model
