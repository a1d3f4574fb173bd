// Module hooks without Python. LibTorch C++ has no forward/backward hooks on modules, so a model
// marks each module that owns parameters by running its forward through run_module(). With no
// engine active this is a plain call; the chunk engine uses it to fetch the module's parameters
// before its forward, release them after, and fetch them again before its backward (through an
// autograd function on the module's output). Gradients are collected by hooks on the parameter
// tensors, which need no change to the model.
//
// For a user's own model (the "small documented change", docs/engine.md): in each leaf module that
// owns parameters, write
//     return pstar::model::run_module(*this, [&] { return <the forward as before>; });
#pragma once

#include <functional>
#include <vector>

#include <torch/nn/module.h>

namespace pstar::model {

class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  virtual void pre_forward(torch::nn::Module& module) = 0;
  virtual void post_forward(torch::nn::Module& module) = 0;
  virtual void pre_backward(torch::nn::Module& module) = 0;
};

// A leaf module whose parameters are an input embedding derives from this too (GptEmbedding does):
// with use_cpu_embedding the chunk engine keeps such a module's chunk on the host. A new model
// family marks its embeddings this way, and the engine needs no change.
class EmbeddingLeaf {
 public:
  virtual ~EmbeddingLeaf() = default;
};

inline bool is_embedding_leaf(const torch::nn::Module& module) {
  return dynamic_cast<const EmbeddingLeaf*>(&module) != nullptr;
}

// The engine's hooks while it trains; nullptr otherwise. The hooks installed on this thread, or,
// on a thread that installed none, the process's (autograd runs a CUDA backward on threads of its
// own). Per thread first, so that ranks run as threads of one process (tests) each reach their
// own engine; a CPU backward runs on the thread that called it.
ModuleHooks* active_hooks();

class ScopedModuleHooks {
 public:
  explicit ScopedModuleHooks(ModuleHooks* hooks);
  ~ScopedModuleHooks();
  ScopedModuleHooks(const ScopedModuleHooks&) = delete;
  ScopedModuleHooks& operator=(const ScopedModuleHooks&) = delete;

 private:
  ModuleHooks* previous_;
  ModuleHooks* previous_on_thread_;
};

// Runs `forward` as `module`'s forward, with the active hooks around it.
torch::Tensor run_module(torch::nn::Module& module, const std::function<torch::Tensor()>& forward);

// Activation checkpointing: runs block(x) without keeping its activations and runs it again in
// backward. The recomputation is the same computation, so results are bit-identical. `block`
// must outlive the backward pass.
//
// The block returns its output first, then any side outputs a loss may use (a mixture of experts'
// router probabilities, Note [checkpointed routing] in model/decoder.cpp): each comes back with a
// graph into the checkpoint, and the gradients reaching them flow through the recomputation
// together with the output's.
using CheckpointBlock = std::function<std::vector<torch::Tensor>(const torch::Tensor&)>;
std::vector<torch::Tensor> checkpoint(const CheckpointBlock* block, const torch::Tensor& x);

// True while a checkpointed block runs again in backward (on this thread): a block that records
// what its forward saw records it once, in the first forward.
bool recomputing();

}  // namespace pstar::model
