// The counter-based initial values (Note [counter-based init]): the generator's words against
// LibTorch's own Philox (at::philox_engine, written independently of ours), its normals against a
// float64 computation from those words, their distribution against the normal's, and the
// properties the engines rely on: any thread count and any split of a parameter write the same
// bits.
#include <ATen/core/PhiloxRNGEngine.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/formats/config.h"
#include "pstar/model/factory.h"
#include "pstar/model/init.h"
#include "pstar/model/model_shape.h"

namespace pstar::model {
namespace {

constexpr uint64_t kSeeds[] = {0, 1234, 0xFFFFFFFFFFFFFFFFull};

// LibTorch's Philox: key = seed, counter = (offset, subsequence), four words per offset.
std::array<uint32_t, 4> aten_block(uint64_t seed, uint64_t stream, uint64_t block) {
  at::philox_engine engine(seed, stream, block);
  return {engine(), engine(), engine(), engine()};
}

TEST(InitTest, PhiloxWordsMatchLibTorchsPhilox) {
  for (const uint64_t seed : kSeeds)
    for (const uint64_t stream : {uint64_t{0}, init_stream("transformer.wte.weight")})
      for (const uint64_t block : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, uint64_t{1} << 33})
        EXPECT_EQ(init_philox_block(seed, stream, block), aten_block(seed, stream, block))
            << seed << " " << stream << " " << block;
}

TEST(InitTest, StreamIsFnv1aOfTheName) {
  EXPECT_EQ(init_stream(""), 0xcbf29ce484222325ull);   // FNV-1a's offset basis
  EXPECT_EQ(init_stream("a"), 0xaf63dc4c8601ec8cull);  // the published 64-bit FNV-1a of "a"
  EXPECT_NE(init_stream("model.layers.0.mlp.up_proj.weight"),
            init_stream("model.layers.0.mlp.gate_proj.weight"));
}

// Box-Muller in float64 from the words (the definition in Note [counter-based init]).
double reference_normal(uint64_t seed, uint64_t stream, int64_t i) {
  const auto w = aten_block(seed, stream, static_cast<uint64_t>(i / 4));
  const int pair = static_cast<int>(i % 4) / 2;
  const double u1 = (static_cast<double>(w[2 * pair] >> 1) + 0.5) / 2147483648.0;
  const double angle = 2.0 * M_PI * static_cast<double>(w[2 * pair + 1] >> 8) / 16777216.0;
  const double r = std::sqrt(-2.0 * std::log(u1));
  return i % 2 == 0 ? r * std::cos(angle) : r * std::sin(angle);
}

TEST(InitTest, NormalsAgreeWithAFloat64BoxMuller) {
  const int64_t n = 1 << 16;
  for (const uint64_t seed : kSeeds) {
    const uint64_t stream = init_stream("model.embed_tokens.weight");
    std::vector<float> z(n);
    init_standard_normals(seed, stream, 0, n, z.data());
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = reference_normal(seed, stream, i);
      // fp32 arithmetic from fp32 inputs: a few ulps of |z|, and u1 rounded to 24 bits near 1,
      // where r is small.
      const double error =
          std::abs(z[static_cast<size_t>(i)] - want) / (1e-6 * (1.0 + std::abs(want)));
      worst = std::max(worst, error);
    }
    EXPECT_LT(worst, 1.0) << "seed " << seed;
  }
}

// The moments and the dependence of 2^22 normals against the standard normal's, within five
// standard errors (fixed seeds: the outcome is the same on every run).
TEST(InitTest, NormalsHaveTheMomentsAndIndependenceOfTheNormalDistribution) {
  const int64_t n = int64_t{1} << 22;
  std::vector<float> a(n), b(n), c(n);
  init_standard_normals(1234, init_stream("x.weight"), 0, n, a.data());
  init_standard_normals(1234, init_stream("y.weight"), 0, n, b.data());  // another name
  init_standard_normals(1235, init_stream("x.weight"), 0, n, c.data());  // another seed
  double sum = 0, sq = 0, cube = 0, fourth = 0, lag1 = 0, lag4 = 0, ab = 0, ac = 0;
  int64_t beyond3 = 0, below_q = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[static_cast<size_t>(i)];
    sum += x;
    sq += x * x;
    cube += x * x * x;
    fourth += x * x * x * x;
    if (i + 1 < n) lag1 += x * a[static_cast<size_t>(i + 1)];  // the pair's cos and sin
    if (i + 4 < n) lag4 += x * a[static_cast<size_t>(i + 4)];  // the next Philox block
    ab += x * b[static_cast<size_t>(i)];
    ac += x * c[static_cast<size_t>(i)];
    beyond3 += std::abs(x) > 3.0 ? 1 : 0;
    below_q += x < -1.0 ? 1 : 0;
  }
  const double dn = static_cast<double>(n);
  const double se = 1.0 / std::sqrt(dn);
  EXPECT_NEAR(sum / dn, 0.0, 5 * se);
  EXPECT_NEAR(sq / dn, 1.0, 5 * std::sqrt(2.0) * se);
  EXPECT_NEAR(cube / dn, 0.0, 5 * std::sqrt(15.0) * se);
  EXPECT_NEAR(fourth / dn, 3.0, 5 * std::sqrt(96.0) * se);
  for (const double product : {lag1, lag4, ab, ac}) EXPECT_NEAR(product / dn, 0.0, 5 * se);
  // Tails and a quantile: P(|z| > 3) = 0.0026998, P(z < -1) = 0.1586553.
  const auto binomial = [&](double p) { return 5 * std::sqrt(p * (1 - p) / dn); };
  EXPECT_NEAR(static_cast<double>(beyond3) / dn, 0.0026998, binomial(0.0026998));
  EXPECT_NEAR(static_cast<double>(below_q) / dn, 0.1586553, binomial(0.1586553));
}

TEST(InitTest, AnySplitOfARangeWritesTheSameBits) {
  const uint64_t stream = init_stream("p");
  const int64_t n = 1000;
  std::vector<float> whole(n);
  init_standard_normals(7, stream, 0, n, whole.data());
  for (const auto& [begin, end] :
       {std::pair<int64_t, int64_t>{1, 2}, {3, 70}, {63, 65}, {997, 1000}}) {
    std::vector<float> part(static_cast<size_t>(end - begin));
    init_standard_normals(7, stream, begin, end, part.data());
    EXPECT_EQ(std::memcmp(part.data(), whole.data() + begin, part.size() * 4), 0)
        << "[" << begin << ", " << end << ")";
  }
}

// Values for one parameter of each kind, written by write_init with `threads` intra-op threads.
struct Written {
  std::vector<float> f32;
  std::vector<uint16_t> bf16, f16;
};
Written write_with_threads(int threads, int64_t n, int* threads_used = nullptr) {
  const int before = torch::get_num_threads();
  torch::set_num_threads(threads);
  Written out;
  out.f32.resize(3 * n);
  out.bf16.resize(3 * n);
  out.f16.resize(n);
  std::vector<InitWrite> writes;
  const ParameterInit kinds[] = {{ParameterInit::Kind::kNormal, 0.02},
                                 {ParameterInit::Kind::kZeros, 0},
                                 {ParameterInit::Kind::kOnes, 0}};
  for (int k = 0; k < 3; ++k) {
    InitWrite w;
    w.init = kinds[k];
    w.stream = init_stream("w" + std::to_string(k));
    w.end = n;
    w.f32 = out.f32.data() + k * n;
    w.low = out.bf16.data() + k * n;
    w.low_type = optim::ParamOutType::kBF16;
    writes.push_back(w);
  }
  InitWrite half = writes[0];  // the normal parameter again, its copy in fp16, no fp32
  half.f32 = nullptr;
  half.low = out.f16.data();
  half.low_type = optim::ParamOutType::kF16;
  writes.push_back(half);
  const int used = write_init(99, writes);
  if (threads_used != nullptr) *threads_used = used;
  torch::set_num_threads(before);
  return out;
}

TEST(InitTest, OneTwoAndManyThreadsWriteTheSameBits) {
  // Several pieces (kInitPiece) per parameter, and a ragged end.
  const int64_t n = 3 * kInitPiece + 17;
  int used = 0;
  const Written one = write_with_threads(1, n, &used);
  EXPECT_EQ(used, 1);
  for (const int threads : {2, 7}) {
    const Written other = write_with_threads(threads, n, &used);
    // The loop really ran on several threads (a file calling at::parallel_for without -fopenmp
    // would run it on one: Note [parallel first touch]).
    EXPECT_GT(used, 1) << threads << " threads";
    EXPECT_TRUE(one.f32 == other.f32) << threads << " threads";
    EXPECT_TRUE(one.bf16 == other.bf16) << threads << " threads";
    EXPECT_TRUE(one.f16 == other.f16) << threads << " threads";
  }
  // The kinds: N(0, 0.02^2) from the standard normals, zeros, ones.
  std::vector<float> z(n);
  init_standard_normals(99, init_stream("w0"), 0, n, z.data());
  for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(one.f32[i], z[i] * 0.02f) << i;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(one.f32[n + i], 0.0f);
    ASSERT_EQ(one.f32[2 * n + i], 1.0f);
  }
  // The 16-bit copies are LibTorch's own rounding of the fp32 values (to nearest even).
  const auto f32 = torch::from_blob(const_cast<float*>(one.f32.data()), {3 * n}, torch::kFloat32);
  const auto bf16 = f32.to(torch::kBFloat16);
  EXPECT_EQ(std::memcmp(bf16.data_ptr(), one.bf16.data(), one.bf16.size() * 2), 0);
  const auto f16 = f32.narrow(0, 0, n).to(torch::kFloat16);
  EXPECT_EQ(std::memcmp(f16.data_ptr(), one.f16.data(), one.f16.size() * 2), 0);
}

// Note [counter-based init]: the kernel of every instruction set this CPU has writes the scalar
// kernel's bits (fp32, bf16 and fp16 outputs, ragged ranges).
TEST(InitTest, EveryInstructionSetWritesTheSameBits) {
  using optim::detail::Isa;
  const Isa scalar = Isa::kScalar;
  detail::set_init_isa_for_testing(&scalar);
  const int64_t n = 2 * kInitPiece + 77;
  const Written reference = write_with_threads(2, n);
  std::vector<float> part_reference(1000);
  init_standard_normals(3, init_stream("q"), 5, 1005, part_reference.data());
  for (const Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (detail::set_init_isa_for_testing(&isa) != isa) {
      std::printf("this CPU has no %s: not compared\n", optim::detail::isa_name(isa));
      continue;
    }
    SCOPED_TRACE(init_isa());
    const Written other = write_with_threads(2, n);
    EXPECT_TRUE(other.f32 == reference.f32);
    EXPECT_TRUE(other.bf16 == reference.bf16);
    EXPECT_TRUE(other.f16 == reference.f16);
    std::vector<float> part(1000);
    init_standard_normals(3, init_stream("q"), 5, 1005, part.data());
    EXPECT_EQ(std::memcmp(part.data(), part_reference.data(), part.size() * 4), 0);
  }
  detail::set_init_isa_for_testing(nullptr);
  if (optim::detail::detected_isa() == Isa::kScalar)
    GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: only the scalar kernel ran";
}

// The vector kernels make each lane's 64-bit block number in 32-bit words: where the low word wraps
// inside one call, the high word must gain one in exactly those lanes.
TEST(InitTest, BlocksAcrossTwoToThe32MatchTheReferenceInEveryInstructionSet) {
  using optim::detail::Isa;
  const uint64_t stream = init_stream("model.embed_tokens.weight");
  const int64_t begin = 4 * ((int64_t{1} << 32) - 37) + 3, n = 4 * 300;
  std::vector<float> reference;
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (detail::set_init_isa_for_testing(&isa) != isa) continue;
    SCOPED_TRACE(init_isa());
    std::vector<float> z(static_cast<size_t>(n));
    init_standard_normals(7, stream, begin, begin + n, z.data());
    for (int64_t i = 0; i < n; ++i) {
      const double want = reference_normal(7, stream, begin + i);
      ASSERT_LT(std::abs(z[static_cast<size_t>(i)] - want), 1e-6 * (1.0 + std::abs(want)))
          << "element " << begin + i << " (block " << (begin + i) / 4 << ")";
    }
    if (reference.empty())
      reference = z;
    else
      EXPECT_EQ(std::memcmp(z.data(), reference.data(), z.size() * 4), 0);
  }
  detail::set_init_isa_for_testing(nullptr);
}

TEST(InitTest, ParametersStartAsHuggingFacesInitWeightsSays) {
  using Kind = ParameterInit::Kind;
  ModelShape gpt;
  gpt.family = ModelFamily::kGpt;
  gpt.gpt.layers = 8;
  const double residual = 0.02 / std::sqrt(16.0);
  const std::pair<const char*, ParameterInit> gpt_cases[] = {
      {"transformer.wte.weight", {Kind::kNormal, 0.02}},
      {"transformer.wpe.weight", {Kind::kNormal, 0.02}},
      {"transformer.h.3.attn.c_attn.weight", {Kind::kNormal, 0.02}},
      {"transformer.h.3.attn.c_proj.weight", {Kind::kNormal, residual}},
      {"transformer.h.3.mlp.c_fc.weight", {Kind::kNormal, 0.02}},
      {"transformer.h.3.mlp.c_proj.weight", {Kind::kNormal, residual}},
      {"transformer.h.3.mlp.c_proj.bias", {Kind::kZeros, 0}},
      {"transformer.h.0.ln_1.weight", {Kind::kOnes, 0}},
      {"transformer.h.0.ln_2.bias", {Kind::kZeros, 0}},
      {"transformer.ln_f.weight", {Kind::kOnes, 0}},
  };
  for (const auto& [name, want] : gpt_cases) {
    const ParameterInit got = parameter_init(gpt, name);
    EXPECT_EQ(got.kind, want.kind) << name;
    EXPECT_DOUBLE_EQ(got.std, want.std) << name;
  }
  ModelShape llama;
  llama.family = ModelFamily::kDecoder;
  const std::pair<const char*, ParameterInit> llama_cases[] = {
      {"model.embed_tokens.weight", {Kind::kNormal, 0.02}},
      {"model.layers.1.self_attn.q_proj.weight", {Kind::kNormal, 0.02}},
      {"model.layers.1.self_attn.q_proj.bias", {Kind::kZeros, 0}},
      {"model.layers.1.mlp.down_proj.weight", {Kind::kNormal, 0.02}},
      {"model.layers.1.input_layernorm.weight", {Kind::kOnes, 0}},
      {"model.layers.1.post_attention_layernorm.weight", {Kind::kOnes, 0}},
      {"model.norm.weight", {Kind::kOnes, 0}},
      {"lm_head.weight", {Kind::kNormal, 0.02}},
  };
  for (const auto& [name, want] : llama_cases) {
    const ParameterInit got = parameter_init(llama, name);
    EXPECT_EQ(got.kind, want.kind) << name;
    EXPECT_DOUBLE_EQ(got.std, want.std) << name;
  }
  EXPECT_THROW(parameter_init(gpt, "transformer.h.0.attn.unknown"), InternalError);
}

// A model built in place and its units' values: each parameter holds exactly its stream's values.
TEST(InitTest, ABuiltModelHoldsItsParametersStreams) {
  ModelShape shape;
  shape.family = ModelFamily::kGpt;
  shape.gpt.hidden = 32;
  shape.gpt.layers = 2;
  shape.gpt.heads = 4;
  shape.gpt.vocab_size = 50;
  shape.gpt.seq_len = 16;
  BuildOptions options;
  options.seed = 5;
  auto model = build_causal_lm(shape, options);
  for (const auto& item : model->named_parameters()) {
    const at::Tensor& p = item.value();
    const ParameterInit init = parameter_init(shape, item.key());
    std::vector<float> want(static_cast<size_t>(p.numel()));
    init_standard_normals(5, init_stream(item.key()), 0, p.numel(), want.data());
    for (float& v : want)
      v = init.kind == ParameterInit::Kind::kNormal ? v * static_cast<float>(init.std)
          : init.kind == ParameterInit::Kind::kOnes ? 1.0f
                                                    : 0.0f;
    EXPECT_EQ(std::memcmp(p.data_ptr<float>(), want.data(), want.size() * 4), 0) << item.key();
  }
}

// The decoder families start at their norms' identity: w·x̂ norms at 1 (Qwen3's q/k norms too),
// Gemma's (1 + w)·x̂ norms at 0; the embedding's padding row at 0 (Hugging Face's _init_weights).
// Every other element is its stream's normal value, whichever engine writes it.
TEST(InitTest, DecoderNormsAndThePaddingRowStartWhereHuggingFacesDo) {
  for (const char* preset : {"gemma-3-1b", "qwen3-0.6b"}) {
    SCOPED_TRACE(preset);
    config::ModelConfig m;
    m.preset = preset;
    m.hidden = 64;
    m.heads = 8;  // Qwen3's 8 key/value heads
    m.layers = 2;
    m.vocab_size = 40;
    m.seq_len = 16;
    const ModelShape shape = resolve_model_shape(m);
    const bool gemma = std::string(preset) == "gemma-3-1b";
    ASSERT_EQ(shape.decoder.pad_token_id.has_value(), gemma);
    BuildOptions options;
    options.seed = 9;
    auto model = build_causal_lm(shape, options);
    int norms = 0;
    for (const auto& item : model->named_parameters()) {
      const std::string& name = item.key();
      const at::Tensor& p = item.value();
      if (name.size() > 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0) {
        ++norms;
        EXPECT_TRUE(torch::equal(p, torch::full_like(p, gemma ? 0.0 : 1.0))) << name;
        continue;
      }
      if (name != "model.embed_tokens.weight" || !gemma) continue;
      EXPECT_TRUE(torch::equal(p[0], torch::zeros_like(p[0]))) << "the padding row";
      std::vector<float> want(static_cast<size_t>(p.numel()));
      init_standard_normals(9, init_stream(name), 0, p.numel(), want.data());
      const auto rows = torch::from_blob(want.data(), p.sizes()).mul(0.02f);
      EXPECT_TRUE(torch::equal(p.narrow(0, 1, p.size(0) - 1), rows.narrow(0, 1, p.size(0) - 1)));
    }
    // Gemma: four a block, q/k norms, the final one; Qwen3: two a block, q/k norms, the final one.
    EXPECT_EQ(norms, gemma ? 2 * 6 + 1 : 2 * 4 + 1);
  }
}

}  // namespace
}  // namespace pstar::model
