// The key/value cache itself (Note [kv cache]): a prompt fed in blocks at an offset gives the
// float64 reference's logits, sliding layers keep no more than their window, and what the cache
// holds never passes KvCache::bytes, the figure `pstar generate` counts against the device's free
// memory before it starts (session.cpp).
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/generate/generate_fixture.h"
#include "pstar/model/decoder.h"
#include "pstar/model/kv_cache.h"

namespace pstar::generate {
namespace {

using pstar::testing::GenerationReference;
using testing::follow;
using testing::load;

constexpr double kTolerance = 1e-5;  // fp32 against float64, relative to the largest logit

class KvCacheTest : public ::testing::TestWithParam<const char*> {};

// Prompts of 9, 4 and 13 tokens left-padded to 13 and fed in blocks of 2, 3 and 5 slots: blocks
// at an offset that start inside the padding, cross the sliding windows (5 and 6) and end on a
// row's first real token. Every step's logits are the reference's.
TEST_P(KvCacheTest, APromptInBlocksAtAnOffsetGivesTheReferencesLogits) {
  const GenerationReference* ref = pstar::testing::generation_reference(GetParam());
  if (ref == nullptr) GTEST_SKIP() << "no Python with torch (Debian: python3-torch)";
  auto model = load(ref->dir);
  for (const int64_t block : {2, 3, 5})
    follow(*model, *ref, ref->forced, {0, 1, 2}, /*use_cache=*/true, kTolerance, block);
}

// The bytes of the tensors `cache` keeps (each storage once: a sliding layer's keys are a view of
// the last block's concatenation).
int64_t held_bytes(model::KvCache& cache, int64_t layers) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (int64_t i = 0; i < layers; ++i) {
    for (const at::Tensor* t : {&cache.layer(i).k, &cache.layer(i).v}) {
      if (!t->defined() || !seen.insert(t->storage().data()).second) continue;
      bytes += static_cast<int64_t>(t->storage().nbytes());
    }
  }
  return bytes;
}

TEST_P(KvCacheTest, SlidingLayersKeepTheirWindowAndTheCacheStaysWithinItsCountedBytes) {
  const GenerationReference* ref = pstar::testing::generation_reference(GetParam());
  if (ref == nullptr) GTEST_SKIP() << "no Python with torch (Debian: python3-torch)";
  auto model = load(ref->dir);
  auto& decoder = dynamic_cast<model::Decoder&>(*model);
  const model::DecoderConfig& config = decoder.config();
  const int64_t batch = static_cast<int64_t>(ref->prompts.size()), steps = 12;
  int64_t longest = 0;
  for (const auto& p : ref->prompts) longest = std::max<int64_t>(longest, p.size());
  auto ids = torch::zeros({batch, longest}, torch::kInt64);
  auto padding = torch::empty({batch}, torch::kInt64);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& p = ref->prompts[static_cast<size_t>(b)];
    const auto length = static_cast<int64_t>(p.size());
    padding[b] = longest - length;
    ids[b].narrow(0, longest - length, length).copy_(torch::tensor(p, torch::kInt64));
  }
  const int64_t block = 4, capacity = longest + steps;
  const int64_t counted = model::KvCache::bytes(config, batch, capacity, block, 4);
  // Every layer full: capacity slots of keys and values each.
  const int64_t all_full =
      2 * batch * config.kv_heads * config.head_dim * 4 * capacity * config.layers;
  torch::NoGradGuard no_grad;
  model::KvCache cache(config, padding, capacity);
  int64_t peak = 0;
  auto after = [&](const std::string& what) {
    peak = std::max(peak, held_bytes(cache, config.layers));
    for (int64_t i = 0; i < config.layers; ++i) {
      const model::LayerKv& kv = cache.layer(i);
      if (config.layer_kind(i) == model::LayerKind::kSliding &&
          *config.attention.sliding_window < capacity) {
        EXPECT_LE(kv.columns, *config.attention.sliding_window - 1) << what << ", layer " << i;
        EXPECT_EQ(kv.first_slot + kv.columns, cache.slots()) << what << ", layer " << i;
      } else {
        EXPECT_EQ(kv.columns, cache.slots()) << what << ", layer " << i;
      }
    }
  };
  for (int64_t at = 0; at < longest; at += block) {
    decoder.forward_cached(ids.narrow(1, at, std::min(block, longest - at)), cache);
    after("prompt block at " + std::to_string(at));
  }
  for (int64_t s = 0; s < steps; ++s) {
    decoder.forward_cached(torch::full({batch, 1}, s + 1, torch::kInt64), cache);
    after("step " + std::to_string(s));
  }
  EXPECT_EQ(cache.slots(), capacity);
  EXPECT_LE(peak, counted) << "the cache held more than pstar generate counts for it";
  if (config.attention.layer_kinds.empty() ||
      std::count(config.attention.layer_kinds.begin(), config.attention.layer_kinds.end(),
                 model::LayerKind::kSliding) == 0) {
    EXPECT_EQ(counted, all_full);
    EXPECT_EQ(peak, counted) << "every layer full holds its whole buffer";
  } else {
    EXPECT_LT(counted, all_full) << "the sliding layers' windows are not counted as smaller";
    EXPECT_LT(peak, all_full);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, KvCacheTest,
                         ::testing::Values("llama", "mistral", "gemma3_text"));

}  // namespace
}  // namespace pstar::generate
