// Packed records through the models (Note [packed attention], Note [packed batches]): several
// records in one row, each attending only to itself with its own positions, give the logits and
// the gradients of each record run alone, for GPT and Llama; only the named rows get logits; and
// the default forward_records of a model without packing serves one record a row.
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/model/decoder.h"
#include "pstar/model/decoder_shape.h"
#include "pstar/model/gpt.h"
#include "pstar/model/hf_decoder_config.h"
#include "pstar/model/ops.h"

namespace pstar::model {
namespace {

constexpr int64_t kVocab = 61;
constexpr int64_t kSeq = 16;

std::shared_ptr<CausalLM> gpt() {
  GptConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.vocab_size = kVocab;
  c.seq_len = kSeq;
  BuildOptions o;
  o.seed = 11;
  return std::make_shared<Gpt>(c, o);
}

std::shared_ptr<CausalLM> llama() {
  DecoderConfig c = *find_decoder_preset("llama-tiny");
  c.vocab_size = kVocab;
  c.seq_len = kSeq;
  BuildOptions o;
  o.seed = 12;
  return std::make_shared<Decoder>(c, o);
}

// Two rows: records of 5, 7 and 4 tokens filling the first exactly, then 6 and 3 tokens and 7
// positions of padding. Returns the records' ids and the packed tensors.
struct Packed {
  std::vector<torch::Tensor> records;  // [len] int64 each
  std::vector<int64_t> row_of, start_of;
  torch::Tensor ids, positions, segments;  // [2, kSeq]
};

Packed pack(uint64_t seed) {
  const std::vector<std::vector<int64_t>> rows = {{5, 7, 4}, {6, 3}};
  torch::manual_seed(seed);
  Packed p;
  p.ids = torch::zeros({2, kSeq}, torch::kLong);
  p.positions = torch::zeros({2, kSeq}, torch::kLong);
  p.segments = torch::zeros({2, kSeq}, torch::kLong);
  for (int64_t r = 0; r < 2; ++r) {
    int64_t at = 0, seg = 0;
    for (int64_t len : rows[static_cast<size_t>(r)]) {
      const auto ids = torch::randint(0, kVocab, {len}, torch::kLong);
      p.records.push_back(ids);
      p.row_of.push_back(r);
      p.start_of.push_back(at);
      p.ids[r].narrow(0, at, len).copy_(ids);
      p.positions[r].narrow(0, at, len).copy_(torch::arange(len, torch::kLong));
      p.segments[r].narrow(0, at, len).fill_(seg++);
      at += len;
    }
    if (at < kSeq) {  // padding: its own segment, positions from 0, id 0
      p.positions[r].narrow(0, at, kSeq - at).copy_(torch::arange(kSeq - at, torch::kLong));
      p.segments[r].narrow(0, at, kSeq - at).fill_(seg);
    }
  }
  return p;
}

// Every position but the padding's.
torch::Tensor real_rows(const Packed& p) {
  std::vector<int64_t> rows;
  for (size_t k = 0; k < p.records.size(); ++k)
    for (int64_t i = 0; i < p.records[k].size(0); ++i)
      rows.push_back(p.row_of[k] * kSeq + p.start_of[k] + i);
  return torch::tensor(rows, torch::kLong);
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-30);
}

void packed_equals_alone(const std::shared_ptr<CausalLM>& model) {
  ASSERT_TRUE(model->takes_packed_records());
  const Packed p = pack(3);
  const torch::Tensor rows = real_rows(p);
  const auto packed = model->forward_records(p.ids, {p.positions, p.segments, rows});
  ASSERT_EQ(packed.sizes(), (std::vector<int64_t>{rows.size(0), kVocab}));
  // Each record alone, through the plain forward: its rows of the packed logits.
  int64_t at = 0;
  torch::Tensor loss_alone = torch::zeros({}, torch::kFloat32);
  for (const auto& ids : p.records) {
    const int64_t len = ids.size(0);
    const auto alone = model->forward(ids.unsqueeze(0)).squeeze(0);
    EXPECT_LT(rel(packed.narrow(0, at, len), alone), 1e-5) << "record at " << at;
    // A loss over every next token of the record (the last has none).
    loss_alone =
        loss_alone + torch::nn::functional::cross_entropy(
                         alone.narrow(0, 0, len - 1), ids.narrow(0, 1, len - 1),
                         torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    at += len;
  }
  // The same loss from the packed logits, and the gradients of both.
  std::vector<int64_t> inputs_rows, targets;
  at = 0;
  for (const auto& ids : p.records) {
    for (int64_t i = 0; i + 1 < ids.size(0); ++i) {
      inputs_rows.push_back(at + i);
      targets.push_back(ids[i + 1].item<int64_t>());
    }
    at += ids.size(0);
  }
  const auto loss_packed = torch::nn::functional::cross_entropy(
      packed.index_select(0, torch::tensor(inputs_rows, torch::kLong)),
      torch::tensor(targets, torch::kLong),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  EXPECT_LT(std::abs(loss_packed.item<double>() - loss_alone.item<double>()),
            1e-5 * std::abs(loss_alone.item<double>()));
  std::vector<torch::Tensor> params = model->parameters();
  const auto g_packed = torch::autograd::grad({loss_packed}, params);
  const auto g_alone = torch::autograd::grad({loss_alone}, params);
  for (size_t i = 0; i < params.size(); ++i) {
    if (g_alone[i].norm().item<double>() == 0) continue;  // e.g. unused embedding rows' tables
    EXPECT_LT(rel(g_packed[i], g_alone[i]), 2e-5) << "parameter " << i;
  }
}

TEST(PackedRecords, GptGivesEachRecordItsOwnLogitsAndGradients) { packed_equals_alone(gpt()); }

TEST(PackedRecords, LlamaGivesEachRecordItsOwnLogitsAndGradients) { packed_equals_alone(llama()); }

// Without the mask and the positions, the packed row's later records would see the earlier ones:
// the check above can fail.
TEST(PackedRecords, WithoutSegmentsTheLaterRecordsDiffer) {
  auto model = gpt();
  const Packed p = pack(3);
  const auto rows = real_rows(p);
  const auto flat = model->forward(p.ids).reshape({-1, kVocab}).index_select(0, rows);
  const auto packed = model->forward_records(p.ids, {p.positions, p.segments, rows});
  EXPECT_LT(rel(flat.narrow(0, 0, 5), packed.narrow(0, 0, 5)), 1e-6) << "the first record";
  EXPECT_GT(rel(flat.narrow(0, 5, 7), packed.narrow(0, 5, 7)), 1e-3) << "the second record";
}

TEST(PackedRecords, OnlyTheNamedRowsGetLogits) {
  auto model = llama();
  const Packed p = pack(5);
  const auto all = model->forward_records(p.ids, {p.positions, p.segments, real_rows(p)});
  const auto some = torch::tensor(std::vector<int64_t>{3, 0, 17}, torch::kLong);
  const auto picked = model->forward_records(p.ids, {p.positions, p.segments, some});
  ASSERT_EQ(picked.sizes(), (std::vector<int64_t>{3, kVocab}));
  // Rows 3 and 0 of the batch are entries 3 and 0 of `all`; row 17 (second row, position 1) is
  // entry 16 + 1.
  EXPECT_LT(rel(picked[0], all[3]), 1e-6);
  EXPECT_LT(rel(picked[1], all[0]), 1e-6);
  EXPECT_LT(rel(picked[2], all[17]), 1e-6);
}

TEST(PackedRecords, SegmentMaskIsCausalWithinSegments) {
  const auto segments =
      torch::tensor(std::vector<int64_t>{0, 0, 1, 1, 1, 2}, torch::kLong).view({1, 6});
  const auto m = segment_causal_mask(segments);
  ASSERT_EQ(m.sizes(), (std::vector<int64_t>{1, 1, 6, 6}));
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 6; ++j) {
      const bool want = j <= i && segments[0][i].item<int64_t>() == segments[0][j].item<int64_t>();
      EXPECT_EQ(m[0][0][i][j].item<bool>(), want) << i << "," << j;
    }
}

// A user's model with forward() alone: forward_records serves one record a row, which starts at
// position 0 and sees nothing but its own tokens before the padding.
class PlainModel : public CausalLM {
 public:
  PlainModel() : inner_(gpt()) { register_module("inner", inner_); }
  torch::Tensor forward(const torch::Tensor& ids) override { return inner_->forward(ids); }
  int64_t vocab_size() const override { return kVocab; }
  int64_t max_seq_len() const override { return kSeq; }

 private:
  std::shared_ptr<CausalLM> inner_;
};

TEST(PackedRecords, TheDefaultServesOneRecordARow) {
  auto model = std::make_shared<PlainModel>();
  EXPECT_FALSE(model->takes_packed_records());
  torch::manual_seed(9);
  const auto ids = torch::randint(0, kVocab, {1, kSeq}, torch::kLong);
  auto segments = torch::zeros({1, kSeq}, torch::kLong);
  segments[0].narrow(0, 10, kSeq - 10).fill_(1);  // a record of 10, then padding
  auto positions = torch::arange(kSeq, torch::kLong).view({1, kSeq});
  const auto rows = torch::arange(10, torch::kLong);
  const auto got = model->forward_records(ids, {positions, segments, rows});
  const auto want = gpt()->forward(ids.narrow(1, 0, 10)).squeeze(0);
  EXPECT_LT(rel(got, want), 1e-5);
}

}  // namespace
}  // namespace pstar::model
