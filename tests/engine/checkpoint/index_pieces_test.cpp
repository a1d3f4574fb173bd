// Note [checkpoint pieces]: the index joins the pieces of a split module's tensor that the ranks'
// files hold, and refuses a set of pieces that does not cover the tensor exactly once, or that
// lacks the recorded shape, naming the file and what is wrong. Files written by hand with the
// names pstar train writes (checkpoint/schema.h).
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/checkpoint/index.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/checkpoint/store.h"
#include "test_util.h"

namespace pstar::checkpoint {
namespace {

// One piece of "w" (shape 4 x 5, 20 elements): elements [begin, begin + n).
struct Piece {
  int64_t begin, n;
};

class IndexPiecesTest : public ::testing::Test {
 protected:
  // Rank r's file of a 2-rank checkpoint at step 3 holding `pieces` of "w" (with its moments and,
  // unless `shape` is false, its shape) and a whole "b" on rank 0.
  std::string write_rank(int64_t r, const std::vector<Piece>& pieces, bool shape = true) {
    TensorList t;
    t.emplace_back(kFormatVersionKey, torch::tensor(kFormatVersion, torch::kInt64));
    t.emplace_back(kStep, torch::tensor(int64_t{3}, torch::kInt64));
    t.emplace_back(kRank, torch::tensor(r, torch::kInt64));
    t.emplace_back(kWorldSize, torch::tensor(int64_t{2}, torch::kInt64));
    for (const Piece& p : pieces) {
      const std::string name = piece_name("w", p.begin);
      t.emplace_back(name, torch::arange(p.begin, p.begin + p.n, torch::kFloat32));
      t.emplace_back(exp_avg_of(name), torch::zeros({p.n}));
      t.emplace_back(exp_avg_sq_of(name), torch::zeros({p.n}));
    }
    if (shape && !pieces.empty())
      t.emplace_back(shape_name("w"), torch::tensor(std::vector<int64_t>{4, 5}, torch::kInt64));
    if (r == 0) {
      t.emplace_back("b", torch::ones({3}));
      t.emplace_back(exp_avg_of("b"), torch::zeros({3}));
      t.emplace_back(exp_avg_sq_of("b"), torch::zeros({3}));
    }
    const std::string file = dir_.file("ckpt-" + std::to_string(r) + ".pt");
    write_checkpoint_file(file, t);
    return file;
  }

  CheckpointIndex index(const std::vector<std::string>& files) {
    IndexOptions o;
    o.verify = false;  // hand-made files: no manifest vouches for them
    return index_checkpoint(files, 2, o);
  }

  // The FormatError index() throws, or "" when it throws none.
  std::string refusal(const std::vector<std::string>& files) {
    try {
      (void)index(files);
    } catch (const FormatError& e) {
      return e.what();
    }
    return "";
  }

  pstar::testing::ScratchDir dir_;
};

TEST_F(IndexPiecesTest, PiecesOfTwoFilesJoinIntoOneParameter) {
  const CheckpointIndex ix = index({write_rank(0, {{0, 8}, {16, 4}}), write_rank(1, {{8, 8}})});
  ASSERT_EQ(ix.params.size(), 2u);
  const ShardParameter* w = nullptr;
  for (const ShardParameter& p : ix.params)
    if (p.name == "w") w = &p;
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(w->numel(), 20);
  EXPECT_TRUE(w->in_pieces());
  ASSERT_EQ(w->pieces.size(), 3u);
  EXPECT_EQ(w->pieces[0].begin, 0);
  EXPECT_EQ(w->pieces[1].begin, 8);
  EXPECT_EQ(w->pieces[1].rank, 1);
  EXPECT_EQ(w->pieces[2].stored, "w#16");
  EXPECT_EQ(w->last_rank(), 1);
  EXPECT_EQ(ix.param_bytes, (20 + 3) * 4);
  // A parameter kept whole is one piece under its own name.
  for (const ShardParameter& p : ix.params) {
    if (p.name != "b") continue;
    EXPECT_FALSE(p.in_pieces());
    EXPECT_EQ(p.pieces.size(), 1u);
  }
}

TEST_F(IndexPiecesTest, PiecesThatDoNotCoverTheTensorOnceAreRefused) {
  EXPECT_NE(refusal({write_rank(0, {{0, 8}}), write_rank(1, {{12, 8}})})
                .find("starts at element 12 of 'w' but the pieces before it end at 8; a piece "
                      "is missing"),
            std::string::npos);
  EXPECT_NE(
      refusal({write_rank(0, {{0, 10}}), write_rank(1, {{8, 12}})}).find("two pieces overlap"),
      std::string::npos);
  EXPECT_NE(refusal({write_rank(0, {{0, 8}}), write_rank(1, {{8, 8}})})
                .find("hold 16 of its 20 elements; a piece is missing"),
            std::string::npos);
  const std::string no_shape = refusal({write_rank(0, {{0, 8}}), write_rank(1, {{8, 12}}, false)});
  EXPECT_NE(no_shape.find("ckpt-1.pt: holds pieces of 'w' but not its shape"), std::string::npos)
      << no_shape;
  EXPECT_EQ(refusal({write_rank(0, {{0, 8}}), write_rank(1, {{8, 12}})}), "");
}

TEST(PieceNameTest, ParsesOnlyANameFollowedByAnElementIndex) {
  const auto p = parse_piece_name("lm_head.weight#262668288");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->first, "lm_head.weight");
  EXPECT_EQ(p->second, 262668288);
  EXPECT_EQ(piece_name("a.b", 7), "a.b#7");
  for (const char* not_a_piece : {"lm_head.weight", "#5", "w#", "w#5x", "w#-1"})
    EXPECT_FALSE(parse_piece_name(not_a_piece).has_value()) << not_a_piece;
}

}  // namespace
}  // namespace pstar::checkpoint
