// The keys and values a decoder keeps while it generates (Note [kv cache]), and the attention of a
// block of queries at an offset against them.
//
// Note [kv cache]
// Generation feeds the model a prompt and then one token at a time. Each layer's attention keeps
// the keys and values it has computed, so a step computes the new tokens only and attends to what
// is kept. The rows of a batch are prompts of different lengths, left-padded to one length: every
// row advances one *slot* per token, and row b's real tokens fill the slots from padding[b] on, at
// positions slot - padding[b] (so a prompt's logits are those it has alone). A query at slot i sees
// the key at slot j when j is one of its row's real slots, j <= i, and on a sliding-window layer
// i - j < window (Note [sliding window] in ops.h); and every query sees its own slot, so that a
// padding slot's softmax is never over nothing (its row of garbage is never read, but a NaN in it
// would reach the real slots through the next layer's matmul: 0 · NaN is NaN). Full layers keep
// every slot, in a buffer allocated once for the run's capacity; sliding layers keep only the last
// window - 1 slots, all a later query can see. Rotary angles are computed for the block's positions
// directly (the training path's tables hold model.seq_len positions; the context may be longer),
// with the tables' operations, so the values are theirs. Nothing here changes the training path:
// DecoderAttention reaches this code only while Decoder::forward_cached has set its cache.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "pstar/model/decoder_config.h"

namespace pstar::model {

// One layer's keys and values, [batch, kv_heads, columns, head_dim]: column c holds slot
// first_slot + c.
struct LayerKv {
  at::Tensor k, v;
  int64_t first_slot = 0;
  int64_t columns = 0;   // in use
  int64_t window = 0;    // > 0: a sliding layer, which keeps window - 1 slots
  int64_t capacity = 0;  // a full layer's buffer, allocated by its first block in its dtype
};

class KvCache {
 public:
  // A cache for the rows of `padding` ([batch] int64: each row's left-padding slots, on the
  // device the model computes on) and `capacity` slots in all (the padded prompt and every token
  // to come). A full layer's buffer is allocated when its first block comes, in the keys' dtype
  // and place (under the chunk engine, parameters may live elsewhere than the computation).
  KvCache(const DecoderConfig& config, const at::Tensor& padding, int64_t capacity);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  int64_t slots() const { return slots_; }  // filled so far
  const at::Tensor& padding() const { return padding_; }
  LayerKv& layer(int64_t index) { return layers_.at(static_cast<size_t>(index)); }

  // The positions [batch, block] int64 of the next `block` slots (0 on padding slots).
  at::Tensor positions(int64_t block) const;
  // Which kept slots each query of the next `block` slots may see on a layer of `kind`:
  // [batch, 1, block, columns] bool, the columns those the layer holds once the block is in.
  at::Tensor allowed(LayerKind kind, int64_t block) const;
  // After every layer has taken the block.
  void advance(int64_t block);

  // The bytes a cache of `batch` rows and `capacity` slots holds at its largest, for `config` in
  // a dtype of `element_bytes` bytes, with blocks of at most `block` slots.
  static int64_t bytes(const DecoderConfig& config, int64_t batch, int64_t capacity, int64_t block,
                       int64_t element_bytes);

 private:
  std::vector<LayerKv> layers_;
  at::Tensor padding_;  // [batch] int64 on the cache's device
  int64_t batch_ = 0, capacity_ = 0, slots_ = 0, window_ = 0;
};

// Note [kv cache]: appends a block's keys and values ([batch, kv_heads, block, head_dim], rotated)
// to `kv` and returns softmax(scale · q kᵀ) v over the slots `allowed` lets each query see, for
// queries q [batch, heads, block, head_dim]: [batch, block, heads · head_dim]. Grouped-query heads
// share their key/value head without copies of it; scores in fp32, as the eager path's.
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            LayerKv& kv, const at::Tensor& allowed, double scale);

}  // namespace pstar::model
