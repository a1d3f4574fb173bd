// The chunk store's part for split modules (Note [split modules] in pstar/plan/chunk_layout.h):
// their leaves taken into their groups' parts, the pieces each rank keeps, and the span that holds
// a gathered group's parts side by side while its tensors compute.
#include <algorithm>

#include "chunk_store.h"
#include "grad_accumulator.h"
#include "pstar/base/error.h"

namespace pstar::engine {

void ChunkStore::add_split_module(torch::nn::Module& module, const std::string& prefix,
                                  Residence residence, int64_t k,
                                  const std::function<void(Residence)>& new_chunk_for,
                                  const std::function<void(int64_t)>& on_grad, bool copy_values) {
  const int64_t world = sharding_.world_size;
  const int64_t g = sharding_.group_of(k);
  PSTAR_INTERNAL_ASSERT(planned_.parts[static_cast<size_t>(k)] == 0 && k % world == 0, "module ",
                        prefix, " was planned split from chunk ", k);
  // The first leaf of the group makes it, unless a leaf after it passed it already (empty ordinary
  // chunks complete a group being filled before it); a later leaf of the last group goes on where
  // the one before it ended.
  const bool first_leaf = spans_.count(g) == 0;
  if (first_leaf) {
    while (num_chunks() < k) new_chunk_for(Residence::kMovable);
    while (num_chunks() < k + world) new_chunk_for(residence);
  }
  for (int64_t part = 0; part < world; ++part) {
    const Chunk& c = chunks_[static_cast<size_t>(k + part)];
    PSTAR_INTERNAL_ASSERT(c.part == part && (c.used == 0 || !first_leaf) &&
                              c.host_only() == (residence == Residence::kHostOnly),
                          "module ", prefix, " does not fit chunk ", k + part, " as planned");
  }
  Span& span = spans_[g];
  const int64_t part_size = chunks_[static_cast<size_t>(k)].size;
  Chunk& mine = chunks_[static_cast<size_t>(k + sharding_.rank)];
  int64_t offset = span.used;
  torch::NoGradGuard no_grad;
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    ManagedTensor t;
    t.name = prefix + p.key();
    t.param = p.value();
    t.chunk = k;
    t.offset = offset;
    t.shape = t.param.sizes().vec();
    t.numel = t.param.numel();
    t.split = true;
    const int64_t id = take_parameter(module, std::move(t), on_grad);
    const ManagedTensor& taken = tensors_[static_cast<size_t>(id)];
    offset += taken.numel;
    span.tensors.push_back(id);
    for (int64_t part = 0; part < world; ++part)
      chunks_[static_cast<size_t>(k + part)].tensors.push_back(id);
    const plan::PieceRange piece =
        plan::piece_in_part(taken.offset, taken.numel, sharding_.rank, part_size);
    if (!copy_values || piece.empty()) continue;
    // This rank keeps its part's piece of the values.
    const torch::Tensor values =
        taken.param.detach().reshape({-1}).slice(0, piece.begin, piece.end);
    view(format_.fp32 ? mine.param : mine.master, torch::kFloat32, piece.chunk_offset,
         {piece.numel()})
        .copy_(values);
    if (!format_.fp32)
      view(mine.param, format_.dtype, piece.chunk_offset, {piece.numel()}).copy_(values);
  }
  PSTAR_INTERNAL_ASSERT(offset <= world * part_size, "module ", prefix, " (up to element ", offset,
                        ") does not fit ", world, " parts of ", part_size);
  span.used = offset;
  for (int64_t part = 0; part < world; ++part)
    chunks_[static_cast<size_t>(k + part)].used =
        std::clamp<int64_t>(offset - part * part_size, 0, part_size);
  repoint_span(g);  // frees the module's original storage
}

OwnedPiece ChunkStore::owned_piece(const ManagedTensor& t) const {
  OwnedPiece piece;
  if (!t.split) {
    if (chunks_[static_cast<size_t>(t.chunk)].remote) return piece;
    piece.chunk = t.chunk;
    piece.offset = t.offset;
    piece.end = t.numel;
    return piece;
  }
  const int64_t k = t.chunk + sharding_.rank;
  const plan::PieceRange range = plan::piece_in_part(t.offset, t.numel, sharding_.rank, size(k));
  piece.chunk = k;
  piece.offset = range.chunk_offset;
  piece.begin = range.begin;
  piece.end = range.end;
  return piece;
}

void ChunkStore::repoint_span(int64_t g) {
  torch::NoGradGuard no_grad;
  const Span& s = span(g);
  const Chunk& first = chunks_[static_cast<size_t>(sharding_.first_of_group(g))];
  const Place place = first.host_only() ? Place::kHost : Place::kDevice;
  for (int64_t id : s.tensors) {
    auto& t = tensors_[static_cast<size_t>(id)];
    set_data_keeping_accumulator(
        t.param,
        s.open() ? param_view(t)
                 : torch::empty({0}, torch::dtype(format_.dtype).device(tier_->device_of(place))),
        t.accumulator);
    t.param.mutable_grad() = s.open() ? grad_view(t) : torch::Tensor();
  }
}

Block ChunkStore::span_slot(int64_t g, int64_t part, bool grad) const {
  const Span& s = span(g);
  const int64_t size = chunks_[static_cast<size_t>(sharding_.first_of_group(g))].size;
  const int64_t elem = grad ? 4 : format_.elem_bytes;
  const Block& block = grad ? s.grad : s.param;
  PSTAR_INTERNAL_ASSERT(block && (part + 1) * size * elem <= block.bytes(), "slot ", part,
                        " of group ", g, "'s span");
  return Block(static_cast<char*>(block.data()) + part * size * elem, size * elem, block.side(),
               nullptr);
}

void ChunkStore::open_span(int64_t g) {
  Span& s = spans_.at(g);
  PSTAR_INTERNAL_ASSERT(!s.open(), "group ", g, "'s span opened twice");
  const int64_t first = sharding_.first_of_group(g);
  const int64_t world = sharding_.world_size;
  const int64_t size = chunks_[static_cast<size_t>(first)].size;
  const bool host_only = chunks_[static_cast<size_t>(first)].host_only();
  const Place place = host_only ? Place::kHost : Place::kDevice;
  // Every slot is written whole (by the gather, or by this rank's copy) before anything reads it;
  // the gradient slots start at zero, as a remote chunk's do.
  s.param = allocate_payload(place, world * size * format_.elem_bytes, !host_only,
                             /*zeroed=*/false);
  if (!format_.reuse) s.grad = allocate_payload(place, world * size * 4, !host_only);
  for (int64_t part = 0; part < world; ++part) {
    const int64_t k = first + part;
    Chunk& c = chunks_[static_cast<size_t>(k)];
    if (c.remote) {
      c.param = span_slot(g, part, false);
      if (!format_.reuse) c.grad = span_slot(g, part, true);
      record(k, formats::ChunkEventKind::kAllocate, compute_bytes(k));
    } else {
      Block slot = span_slot(g, part, false);
      tier_->copy(slot, c.param, slot.bytes());
      if (!format_.reuse) {
        // The gradients of the micro-batches before (gradient accumulation) go on summing.
        Block grad = span_slot(g, part, true);
        tier_->copy(grad, c.grad, grad.bytes());
      }
    }
    add_bytes(place, compute_bytes(k));
  }
}

void ChunkStore::close_span(int64_t g) {
  Span& s = spans_.at(g);
  if (!s.open()) return;
  const int64_t first = sharding_.first_of_group(g);
  const Place place = s.param.side();
  for (int64_t id : s.tensors)
    PSTAR_INTERNAL_ASSERT(tensors_[static_cast<size_t>(id)].state != TensorState::kCompute,
                          "releasing group ", g, " while ", tensors_[static_cast<size_t>(id)].name,
                          " is in use");
  for (int64_t part = 0; part < sharding_.world_size; ++part) {
    const int64_t k = first + part;
    Chunk& c = chunks_[static_cast<size_t>(k)];
    if (c.remote) {
      c.param.reset();
      c.grad.reset();
      record(k, formats::ChunkEventKind::kRelease, compute_bytes(k));
    }
    add_bytes(place, -compute_bytes(k));
  }
  s.param.reset();
  s.grad.reset();
  repoint_span(g);
}

}  // namespace pstar::engine
