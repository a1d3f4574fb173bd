// The built-in families' initial values (Note [counter-based init] in pstar/model/init.h): which
// parameter starts how, and the parallel driver over the kernel in init_kernel.cpp.
#include "pstar/model/init.h"

#include <algorithm>
#include <cmath>

#include "init_kernel.h"
#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/core/parallel_fill.h"
#include "pstar/model/model_shape.h"

namespace pstar::model {

uint64_t init_stream(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  for (const char ch : name) {
    h ^= static_cast<uint8_t>(ch);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::array<uint32_t, 4> init_philox_block(uint64_t seed, uint64_t stream, uint64_t block) {
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  init_kernel::philox(c[0], c[1], c[2], c[3], static_cast<uint32_t>(seed),
                      static_cast<uint32_t>(seed >> 32));
  return c;
}

const char* init_isa() { return init_kernel::isa_in_use(); }

namespace detail {
optim::detail::Isa set_init_isa_for_testing(const optim::detail::Isa* isa) {
  return init_kernel::set_isa_for_testing(isa);
}
}  // namespace detail

void init_standard_normals(uint64_t seed, uint64_t stream, int64_t begin, int64_t end, float* out) {
  InitWrite w;
  w.init = ParameterInit{ParameterInit::Kind::kNormal, 1.0};
  w.stream = stream;
  w.begin = begin;
  w.end = end;
  w.f32 = out;
  init_kernel::write_range(seed, w, begin, end);
}

int write_init(uint64_t seed, const std::vector<InitWrite>& writes,
               const std::function<void(int64_t bytes)>& on_done) {
  struct Piece {
    size_t write;
    int64_t begin, end;
  };
  // The writes, then a copy of each that has zeroed elements, which writes zeros there.
  std::vector<InitWrite> all = writes;
  std::vector<Piece> pieces;
  for (size_t i = 0; i < writes.size(); ++i) {
    const InitWrite& w = writes[i];
    PSTAR_INTERNAL_ASSERT(w.begin >= 0 && w.begin <= w.end, "an init write of [", w.begin, ", ",
                          w.end, ")");
    PSTAR_INTERNAL_ASSERT((w.low == nullptr) == (w.low_type == optim::ParamOutType::kNone),
                          "an init write's 16-bit copy without its type, or the reverse");
    const int64_t zb = std::max(w.begin, w.init.zero_begin);
    const int64_t ze = std::min(w.end, w.init.zero_end);
    size_t zeros = i;
    if (zb < ze) {
      InitWrite z = w;
      z.init = ParameterInit{ParameterInit::Kind::kZeros, 0};
      zeros = all.size();
      all.push_back(z);
    }
    for (int64_t b = w.begin; b < w.end; b += kInitPiece) {
      const int64_t e = std::min(w.end, b + kInitPiece);
      if (zb >= ze || e <= zb || b >= ze) {
        pieces.push_back(Piece{i, b, e});
        continue;
      }
      if (b < zb) pieces.push_back(Piece{i, b, zb});
      pieces.push_back(Piece{zeros, std::max(b, zb), std::min(e, ze)});
      if (ze < e) pieces.push_back(Piece{i, ze, e});
    }
  }
  const auto bytes_of = [&](const Piece& p) {
    const InitWrite& w = all[p.write];
    return (p.end - p.begin) * ((w.f32 != nullptr ? 4 : 0) + (w.low != nullptr ? 2 : 0));
  };
  // Each piece's values depend on its elements alone (Note [counter-based init]), so any split
  // over the threads, and any order, writes the same bits.
  return core::parallel_pieces(static_cast<int64_t>(pieces.size()), [&](int64_t k) {
    const Piece& p = pieces[static_cast<size_t>(k)];
    init_kernel::write_range(seed, all[p.write], p.begin, p.end);
    if (on_done) on_done(bytes_of(p));
  });
}

namespace {

bool ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes)
    if (ends_with(name, s)) return true;
  return false;
}

// GPT-2's initialisation (Hugging Face's GPT2PreTrainedModel._init_weights): N(0, 0.02) weights,
// the residual projections' scaled by 1/sqrt(2 * layers), zero biases, unit LayerNorm weights.
ParameterInit gpt_parameter_init(const GptConfig& c, const std::string& name) {
  using Kind = ParameterInit::Kind;
  constexpr double kStd = 0.02;
  if (ends_with(name, ".bias")) return {Kind::kZeros, 0};
  if (ends_with_any(name, {"ln_1.weight", "ln_2.weight", "ln_f.weight"})) return {Kind::kOnes, 0};
  if (ends_with_any(name, {"attn.c_proj.weight", "mlp.c_proj.weight"}))
    return {Kind::kNormal, kStd / std::sqrt(2.0 * static_cast<double>(c.layers))};
  PSTAR_INTERNAL_ASSERT(
      ends_with_any(name, {"wte.weight", "wpe.weight", "attn.c_attn.weight", "mlp.c_fc.weight"}),
      "no initialisation for the GPT parameter ", name);
  return {Kind::kNormal, kStd};
}

// The decoders' (Hugging Face's _init_weights with initializer_range 0.02): N(0, 0.02) for the
// embedding and every linear weight, the head included; zero biases; RMSNorm weights at the
// identity: 1 for w·x̂, 0 for Gemma's (1 + w)·x̂; the padding row of the embedding 0.
ParameterInit decoder_parameter_init(const DecoderConfig& c, const std::string& name) {
  using Kind = ParameterInit::Kind;
  if (name == "model.embed_tokens.weight" && c.pad_token_id) {
    const int64_t row = *c.pad_token_id * c.hidden;
    return {Kind::kNormal, 0.02, row, row + c.hidden};
  }
  if (ends_with(name, ".bias")) return {Kind::kZeros, 0};
  // RMSNorms: *layernorm, q_norm, k_norm, model.norm.
  if (ends_with(name, "norm.weight"))
    return {c.norms.kind == NormKind::kWeight ? Kind::kOnes : Kind::kZeros, 0};
  // Linear weights: the projections, the head, a mixture of experts' router and experts.
  PSTAR_INTERNAL_ASSERT(ends_with_any(name, {"embed_tokens.weight", "proj.weight", "lm_head.weight",
                                             ".gate.weight"}) ||
                            name.find(".experts.") != std::string::npos,
                        "no initialisation for the decoder parameter ", name);
  return {Kind::kNormal, 0.02};
}

}  // namespace

ParameterInit parameter_init(const ModelShape& shape, const std::string& name) {
  switch (shape.family) {
    case ModelFamily::kGpt:
      return gpt_parameter_init(shape.gpt, name);
    case ModelFamily::kDecoder:
      return decoder_parameter_init(shape.decoder, name);
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown model family");
}

}  // namespace pstar::model
