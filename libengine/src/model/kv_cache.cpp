// Note [kv cache]: the cache, the attention of a block at an offset, and the decoder's forward over
// a block of slots.
#include "pstar/model/kv_cache.h"

#include <algorithm>
#include <limits>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/model/decoder.h"
#include "pstar/model/ops.h"

namespace pstar::model {

namespace {

// The window a layer of `kind` keeps, 0 for all: a window no shorter than the run never drops a
// slot, so such a layer keeps everything like a full one.
int64_t kept_window(const DecoderConfig& c, LayerKind kind, int64_t capacity) {
  if (kind != LayerKind::kSliding || !c.attention.sliding_window) return 0;
  const int64_t window = *c.attention.sliding_window;
  return window >= capacity ? 0 : window;
}

}  // namespace

KvCache::KvCache(const DecoderConfig& c, const at::Tensor& padding, int64_t capacity)
    : padding_(padding.to(torch::kInt64)), batch_(padding.size(0)), capacity_(capacity) {
  PSTAR_CHECK(padding.dim() == 1 && batch_ > 0, ConfigError,
              "a kv cache needs one padding count per row, got ", padding.sizes());
  PSTAR_CHECK(capacity > 0, ConfigError, "a kv cache of ", capacity, " slots");
  for (int64_t i = 0; i < c.layers; ++i) {
    LayerKv kv;
    kv.window = kept_window(c, c.layer_kind(i), capacity);
    kv.capacity = capacity;
    if (kv.window > 0) window_ = kv.window;
    layers_.push_back(std::move(kv));
  }
}

at::Tensor KvCache::positions(int64_t block) const {
  const auto slots = torch::arange(slots_, slots_ + block, padding_.options());
  return (slots.unsqueeze(0) - padding_.unsqueeze(1)).clamp_min(0);
}

at::Tensor KvCache::allowed(LayerKind kind, int64_t block) const {
  const int64_t window = kind == LayerKind::kSliding ? window_ : 0;
  const int64_t first = window > 0 ? std::max<int64_t>(0, slots_ - (window - 1)) : 0;
  const auto query = torch::arange(slots_, slots_ + block, padding_.options()).view({block, 1});
  const auto key = torch::arange(first, slots_ + block, padding_.options()).view({1, -1});
  auto seen = key.le(query);  // [block, columns]
  if (window > 0) seen = seen.logical_and((query - key).lt(window));
  const auto real = key.ge(padding_.view({-1, 1, 1}));  // [batch, 1, columns]
  return real.logical_and(seen).logical_or(key.eq(query)).unsqueeze(1);
}

void KvCache::advance(int64_t block) { slots_ += block; }

int64_t KvCache::bytes(const DecoderConfig& c, int64_t batch, int64_t capacity, int64_t block,
                       int64_t element_bytes) {
  int64_t columns = 0;
  for (int64_t i = 0; i < c.layers; ++i) {
    const int64_t window = kept_window(c, c.layer_kind(i), capacity);
    // A sliding layer holds its window and, while it attends, the block beside it.
    columns += window > 0 ? std::min(capacity, window - 1 + block) : capacity;
  }
  return 2 * batch * c.kv_heads * c.head_dim * element_bytes * columns;
}

at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            LayerKv& kv, const at::Tensor& allowed, double scale) {
  const int64_t batch = q.size(0), heads = q.size(1), block = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1);
  at::Tensor keys, values;
  if (kv.window == 0) {
    if (!kv.k.defined()) {
      kv.k = torch::empty({batch, kv_heads, kv.capacity, head_dim}, k.options());
      kv.v = torch::empty({batch, kv_heads, kv.capacity, head_dim}, v.options());
    }
    kv.k.narrow(2, kv.columns, block).copy_(k);
    kv.v.narrow(2, kv.columns, block).copy_(v);
    kv.columns += block;
    keys = kv.k.narrow(2, 0, kv.columns);
    values = kv.v.narrow(2, 0, kv.columns);
  } else {
    keys = kv.columns > 0 ? torch::cat({kv.k, k}, 2) : k;
    values = kv.columns > 0 ? torch::cat({kv.v, v}, 2) : v;
    // Only the last window - 1 slots can be seen from a later query.
    const int64_t all = keys.size(2), keep = std::min(all, kv.window - 1);
    kv.k = keys.narrow(2, all - keep, keep);
    kv.v = values.narrow(2, all - keep, keep);
    kv.first_slot += all - keep;
    kv.columns = keep;
  }
  PSTAR_INTERNAL_ASSERT(allowed.size(-1) == keys.size(2), "kv cache: a mask of ", allowed.size(-1),
                        " columns for ", keys.size(2), " kept slots");
  const int64_t group = heads / kv_heads, columns = keys.size(2);
  if (q.is_cuda()) {
    // Note [fused attention]: memory-efficient kernels for long prompts, keys repeated per head.
    auto per_head = [&](const at::Tensor& t) {
      return t.unsqueeze(2)
          .expand({batch, kv_heads, group, columns, head_dim})
          .reshape({batch, heads, columns, head_dim});
    };
    if (auto fused = fused_causal_attention(q, per_head(keys), per_head(values), allowed, scale))
      return fused->transpose(1, 2).reshape({batch, block, heads * head_dim});
  }
  // The query heads of one key/value head as rows of one matrix: [batch, kv_heads, group · block].
  const auto grouped = q.reshape({batch, kv_heads, group * block, head_dim});
  const auto scores = torch::matmul(grouped, keys.transpose(-2, -1)) * scale;
  const auto mask = allowed.unsqueeze(2)
                        .expand({batch, 1, group, block, columns})
                        .reshape({batch, 1, group * block, columns});
  const auto probs = scores.to(torch::kFloat32)
                         .masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity())
                         .softmax(-1)
                         .to(q.scalar_type());
  return torch::matmul(probs, values)
      .view({batch, heads, block, head_dim})
      .transpose(1, 2)
      .reshape({batch, block, heads * head_dim});
}

torch::Tensor Decoder::forward_cached(const torch::Tensor& input_ids, KvCache& cache) {
  PSTAR_CHECK(input_ids.dim() == 2 && input_ids.size(0) == cache.batch(), ConfigError,
              "a cached forward takes [", cache.batch(), ", block] token ids, got ",
              input_ids.sizes());
  const int64_t block = input_ids.size(1);
  PSTAR_CHECK(cache.slots() + block <= cache.capacity(), ConfigError, "kv cache: ", block,
              " more slots after ", cache.slots(), " would pass its capacity of ",
              cache.capacity());
  auto& m = *model_;
  routing_.clear();  // a mixture of experts records each forward's routing; generation keeps none
  torch::Tensor x = embed(input_ids);
  const auto options = torch::dtype(x.scalar_type()).device(x.device());
  const auto positions = cache.positions(block).to(torch::kFloat32).unsqueeze(-1);
  std::array<RotaryTables, kLayerKinds> rope;
  std::array<torch::Tensor, kLayerKinds> allowed;
  for (size_t k = 0; k < static_cast<size_t>(kLayerKinds); ++k) {
    const auto kind = static_cast<LayerKind>(k);
    // rotary_tables' operations on the block's own positions: [batch, 1, block, head_dim].
    const auto inverse =
        rope_inverse_frequencies(config_.rope_of(kind), config_.head_dim).to(x.device());
    const auto freqs = positions * inverse;
    const auto angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);
    rope[k] = {angles.cos().to(options), angles.sin().to(options)};
    allowed[k] = cache.allowed(kind, block);
  }
  // The layers' attention reads its cache only during this forward (Note [kv cache]).
  struct Attached {
    std::vector<std::shared_ptr<DecoderLayer>>& layers;
    ~Attached() {
      for (auto& layer : layers) layer->self_attn->kv_cache = nullptr;
    }
  } attached{m.layers};
  for (size_t i = 0; i < m.layers.size(); ++i)
    m.layers[i]->self_attn->kv_cache = &cache.layer(static_cast<int64_t>(i));
  for (auto& layer : m.layers) {
    const auto kind = static_cast<size_t>(layer->kind);
    x = layer->forward(x, rope[kind], allowed[kind]);
  }
  cache.advance(block);
  // Only the last slot's logits are needed: the norm and the head see that one alone.
  return head(m.norm->forward(x.select(1, block - 1)));
}

}  // namespace pstar::model
