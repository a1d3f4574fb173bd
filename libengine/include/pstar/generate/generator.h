// Generating token ids from a model: prompts batched with left padding, a key/value cache for the
// decoder (Note [kv cache] in pstar/model/kv_cache.h), stop tokens, sampling. Ids in, ids out: text
// is generate/session.h's business.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "pstar/generate/sampling.h"

namespace pstar::model {
class CausalLM;
}

namespace pstar::generate {

enum class StopReason : uint8_t {
  kStopToken,     // drew one of the stop ids
  kMaxNewTokens,  // drew max_new_tokens tokens
  kContext,       // reached the context: prompt and completion fill it
};
const char* stop_reason_name(StopReason reason);  // "stop_token", "max_new_tokens", "context"

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  // The most positions a row's prompt and completion may fill; 0: the model's own limit
  // (context_limit).
  int64_t context = 0;
  std::vector<int64_t> stop_ids;
  SamplingOptions sampling;
  // false: each step a forward over each row's whole sequence (forward_records), no cache. Models
  // other than the decoder always take that path.
  bool use_cache = true;
  // The prompt goes through the cached forward in blocks of at most this many slots, which bounds
  // the attention scores of a long prompt.
  int64_t prefill_block = 512;
  // Run as many forwards as the longest possible completion needs, even when every row has
  // stopped before (eval_samples: every rank runs the same number of forwards).
  bool fixed_steps = false;
  int64_t pad_id = 0;  // the id on padding slots (any id: nothing sees them)
  // Where the model computes; unset: where its first parameter is (under the chunk engine the
  // trainer names its compute device: its parameters may be on the host).
  std::optional<c10::Device> device;
};

struct Completion {
  std::vector<int64_t> ids;  // generated, the stop token left out
  StopReason reason = StopReason::kMaxNewTokens;
  int64_t stop_id = -1;  // the stop token drawn, with kStopToken
};

struct GenerateHooks {
  // After each forward: the step's logits [batch, vocab] in fp32 on the model's device, row b
  // those of prompt b (rows that have stopped included).
  std::function<void(int64_t step, const at::Tensor& logits)> on_logits;
  // Each token a row keeps, as it is drawn (not the stop token).
  std::function<void(int64_t row, int64_t id)> on_token;
  // Replaces a step's drawn ids ([batch] int64 on the CPU) before they are kept and fed back:
  // tests follow a reference's tokens with it.
  std::function<void(int64_t step, at::Tensor& ids)> override_ids;
};

// The positions a prompt and its completion may fill in `model`: a decoder's
// max_position_embeddings, otherwise its max_seq_len().
int64_t context_limit(model::CausalLM& model);

// Generates a completion of each prompt (ids, at least one each), batched as one. A forward whose
// logits every row ignores is never run, unless options.fixed_steps. ConfigError for an empty
// prompt, or a prompt that leaves no room in the context (naming its index, its length and the
// context).
std::vector<Completion> generate(model::CausalLM& model,
                                 const std::vector<std::vector<int64_t>>& prompts,
                                 const GenerateOptions& options, const GenerateHooks& hooks = {});

}  // namespace pstar::generate
