// Note [one accumulator per tensor]
// LibTorch accumulates a leaf's gradient through one AccumulateGrad node per tensor, which sums
// every use's contribution before it runs (and before the tensor's hooks see it), and which the
// tensor references only weakly. Tensor::set_data drops that reference when the new data is on
// another device or of another type: the next use then makes a second node, and the backward runs
// two accumulations, each with its own hook call. A chunk that moves between two uses of one
// tensor in a step (the tied embedding's chunk, evicted after the embedding and uploaded again for
// the LM head) did exactly that on a GPU: under param/grad reuse each hook call zeroed the slot
// (Gradients::arrive), so the head's gradient was lost, and a chunk could look complete before its
// last contribution. The emulated tier never changes a tensor's device, so only a GPU showed it
// (issue 34, CudaTraining.ResumeIsExact: the warm-up step evicts that chunk).
//
// So a moved tensor gets its node back: set_data_keeping_accumulator remembers the live node and,
// once the tensor is again on the node's device with the node's type, points the tensor at it, so
// that every use in the step feeds the one node. The engine computes only on a chunk's device
// copy, so a tensor is never used on two devices in one step. A node the graph has let go of
// (after the backward) is gone, and the next use makes a new one as usual.
#pragma once

#include <memory>

#include <torch/torch.h>

namespace torch::autograd {
struct Node;
}

namespace pstar::engine {

// param.set_data(data), keeping (or restoring) param's gradient accumulator as the Note says;
// `kept` remembers the tensor's node between calls.
void set_data_keeping_accumulator(torch::Tensor& param, const torch::Tensor& data,
                                  std::weak_ptr<torch::autograd::Node>& kept);

}  // namespace pstar::engine
