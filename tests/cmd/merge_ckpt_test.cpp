// `pstar merge-ckpt` end to end, its outputs: checkpoints written by `pstar train --nproc 2`
// merged into one safetensors file, a Hugging Face folder or a .pt file, by the pstar binary run as
// a subprocess, and checked with the engine's own readers.
#include "merge_ckpt_fixture.h"

namespace pstar::cmd {
namespace {

using namespace merge_testing;  // NOLINT(build/namespaces): the tests' shared fixture and helpers

// gpt_parameter_shapes, which merge-ckpt and --reshard rely on, lists the parameters the GPT
// really has, in the order its units are built (the chunk engine's registration order).
TEST(GptParameterShapesTest, FollowTheModel) {
  const model::GptConfig shape{48, 3, 4, 100, 16};
  model::Gpt gpt(shape);
  const auto expected = model::gpt_parameter_shapes(shape);
  const auto params = gpt.named_parameters();
  ASSERT_EQ(params.size(), expected.size());
  std::vector<int64_t> leaf_numels(model::gpt_leaf_module_numels(shape).size(), 0);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].key(), expected[i].name);
    EXPECT_EQ(params[i].value().sizes().vec(), expected[i].shape) << expected[i].name;
    leaf_numels[static_cast<size_t>(expected[i].leaf)] += params[i].value().numel();
  }
  EXPECT_EQ(leaf_numels, model::gpt_leaf_module_numels(shape));
}

// The merged safetensors holds every rank's fp32 masters bit for bit under GPT-2's names, in
// fp32 or converted to bf16, and the config.json beside it trains from it (model.init_from).
TEST_F(MergeCkptTest, MergedSafetensorsEqualTheShardsAndTrainThroughInitFrom) {
  train_two_ranks(3, "ck", "full.jsonl");
  const fs::path step = dir_.path() / "ck/step-00000003";
  const auto r = merge(
      {"--pattern", "ck/step-00000003/ckpt-*.pt", "--num", "2", "-o", "out/model.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(contains(r.err, "wrote 28 tensors")) << r;
  EXPECT_TRUE(contains(r.err, "out/model.safetensors")) << r;
  EXPECT_EQ(r.out, "out/model.safetensors\n") << r;  // the path written, for scripts

  const auto masters = shard_parameters(step, 2);
  model::GptConfig tiny{64, 2, 4, 256, 32};
  const auto expected = model::gpt_parameter_shapes(tiny);
  ASSERT_EQ(masters.size(), expected.size());
  formats::SafetensorsReader reader(dir_.file("out/model.safetensors"));
  EXPECT_EQ(reader.metadata().at("format"), "pt");  // what Hugging Face's loaders look for
  EXPECT_EQ(reader.metadata().at("pstar.version"), pstar::version());
  ASSERT_EQ(reader.tensors().size(), expected.size());
  for (const auto& p : expected) {
    SCOPED_TRACE(p.name);  // Hugging Face GPT-2 names: transformer.h.0.attn.c_attn.weight, ...
    const formats::TensorInfo* info = reader.find(p.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, formats::DType::kF32);
    EXPECT_EQ(info->shape, p.shape);
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader, *info), masters.at(p.name)));
  }

  // out16/ does not exist yet: merge-ckpt creates it.
  const auto r16 =
      merge({"--dir", "ck/step-00000003", "-o", "out16/model.safetensors", "--dtype", "bf16"});
  ASSERT_EQ(r16.exit_code, 0) << r16;
  formats::SafetensorsReader reader16(dir_.file("out16/model.safetensors"));
  for (const auto& [name, master] : masters) {
    const formats::TensorInfo* info = reader16.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, formats::DType::kBF16) << name;
    EXPECT_TRUE(bitwise_equal(safetensors_tensor(reader16, *info), master.to(torch::kBFloat16)))
        << name;
  }

  // config.json beside the file: the run's config, starting from the merged weights.
  const json merged_config = json::parse(read_text(dir_.file("out/config.json")));
  EXPECT_EQ(merged_config["model"]["init_from"], "model.safetensors");
  EXPECT_EQ(merged_config["model"]["preset"], "gpt-tiny");
  EXPECT_EQ(merged_config["training"]["save_dir"], "");
  const auto fresh = read_metrics(dir_.file("full.jsonl"));
  ASSERT_EQ(fresh.size(), 3u);
  const auto t = train("out/config.json", {"--set", "training.steps=1", "--metrics", "init.jsonl"});
  ASSERT_EQ(t.exit_code, 0) << t;
  EXPECT_TRUE(contains(t.err, "loaded 28 tensors from")) << t;
  const auto init = read_metrics(dir_.file("init.jsonl"));
  ASSERT_EQ(init.size(), 1u);
  // From the trained weights the first loss is well below a fresh start's (ln 256 = 5.55).
  EXPECT_LT(init[0]["loss"].get<double>(), fresh[0]["loss"].get<double>() - 0.2)
      << "fresh " << fresh[0]["loss"] << ", after 3 steps " << fresh[2]["loss"];
  // Through the bf16 file too (converted back to the run's fp32).
  const auto t16 = train("out16/config.json", {"--set", "training.steps=1", "-q"});
  EXPECT_EQ(t16.exit_code, 0) << t16;
}

// -o without an extension: a Hugging Face folder. A Llama (two ranks) merges into bf16 shards of
// at most 100 KB with an index, under the names and shapes of LlamaForCausalLM, a config.json that
// reads back as the same shape, and the folder trains again through model.init_from.
TEST_F(MergeCkptTest, AFolderOutputIsAHuggingFaceFolderThatTrainsAgain) {
  json c = config(3, 3, "ck");
  c["model"] = {{"preset", "llama-tiny"}, {"seq_len", 32}};
  c["engine"]["device_memory"] = "4MB";
  const auto r0 = train(write_config(c, "llama.json"), {"--nproc", "2", "--metrics", "l.jsonl"});
  ASSERT_EQ(r0.exit_code, 0) << r0;
  const auto r = merge({"--dir", "ck/step-00000003", "-o", "out/tuned", "--dtype", "bf16",
                        "--max-shard-size", "100KB"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "out/tuned\n") << r;

  const formats::HfFolder folder = formats::read_hf_folder(dir_.file("out/tuned"));
  EXPECT_EQ(folder.model_type, "llama");
  EXPECT_GT(folder.shards.size(), 1u);  // 0.5 MB of bf16 tensors over 100 KB shards
  EXPECT_FALSE(folder.index_path.empty());
  const model::DecoderConfig shape =
      model::decoder_config_from_hf_json(folder.config_text, folder.config_path);
  const model::DecoderConfig& tiny = *model::find_decoder_preset("llama-tiny");
  EXPECT_EQ(shape.num_params(), tiny.num_params());
  EXPECT_EQ(shape.kv_heads, tiny.kv_heads);
  EXPECT_EQ(json::parse(folder.config_text)["torch_dtype"], "bfloat16");
  const auto masters = shard_parameters(dir_.path() / "ck/step-00000003", 2);
  const auto expected = model::decoder_parameter_shapes(tiny);
  ASSERT_EQ(folder.shard_of.size(), expected.size());
  for (const auto& p : expected) {
    SCOPED_TRACE(p.name);
    formats::SafetensorsReader reader(folder.shard_of.at(p.name));
    const formats::TensorInfo* info = reader.find(p.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, formats::DType::kBF16);
    EXPECT_EQ(info->shape, p.shape);
    EXPECT_TRUE(
        bitwise_equal(safetensors_tensor(reader, *info), masters.at(p.name).to(torch::kBFloat16)));
  }

  // Trains again from the folder: the first loss is the trained level, below a fresh start's.
  json again = config(1, 0, "");
  again["model"] = {{"init_from", "../out/tuned"}, {"seq_len", 32}};
  again["engine"]["device_memory"] = "4MB";
  const auto t = train(write_config(again, "again.json"), {"--metrics", "again.jsonl"});
  ASSERT_EQ(t.exit_code, 0) << t;
  const auto fresh = read_metrics(dir_.file("l.jsonl"));
  const auto init = read_metrics(dir_.file("again.jsonl"));
  ASSERT_EQ(init.size(), 1u);
  EXPECT_LT(init[0]["loss"].get<double>(), fresh[0]["loss"].get<double>() - 0.1);

  // An existing folder is not replaced.
  const auto twice = merge({"--dir", "ck/step-00000003", "-o", "out/tuned"});
  EXPECT_EQ(twice.exit_code, 2) << twice;
  EXPECT_TRUE(contains(twice.err, "already exists and is not an empty folder")) << twice;
}

// The .pt output is a pickled dict of name -> tensor: pstar's checkpoint reader and Python's
// torch.load both read it.
TEST_F(MergeCkptTest, PtOutputIsADictThatTorchLoadReads) {
  train_two_ranks(3, "ck", "full.jsonl");
  const auto r = merge({"--dir", "ck/step-00000003", "-o", "out/model.pt"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const auto masters = shard_parameters(dir_.path() / "ck/step-00000003", 2);
  const checkpoint::TensorMap merged = checkpoint::read_checkpoint_file(dir_.file("out/model.pt"));
  ASSERT_EQ(merged.size(), masters.size());
  for (const auto& [name, master] : masters) {
    ASSERT_TRUE(merged.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(merged.at(name), master)) << name;
  }

  const std::string python = python_with_torch();
  if (python.empty())
    GTEST_SKIP() << "no Python with torch (python3 -c 'import torch' fails; Debian: "
                    "apt-get install python3-torch)";
  // weights_only=True: the default of torch.load from PyTorch 2.6 on, whose unpickler refuses
  // every global but the tensor rebuilders it knows (Note [checkpoint pickle] in
  // checkpoint/store.cpp). Passed explicitly so that an older torch (Debian's 1.13 has the
  // argument) checks it too. The checkpoint's own files come from the same writer.
  write_text(dir_.file("load.py"),
             "import json, sys, torch\n"
             "d = torch.load(sys.argv[1], weights_only=True)\n"
             "c = torch.load(sys.argv[2], weights_only=True)\n"
             "assert isinstance(c, dict) and c['__pstar__.step'].item() == 3, c.keys()\n"
             "print(json.dumps({k: [list(v.shape), str(v.dtype)] for k, v in d.items()}))\n");
  const std::string out = dir_.file("python.json");
  const std::string cmd = python + " " + dir_.file("load.py") + " " + dir_.file("out/model.pt") +
                          " " + dir_.file("ck/step-00000003/ckpt-1.pt") + " > " + out + " 2> " +
                          dir_.file("python.err");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir_.file("python.err"));
  const json seen = json::parse(read_text(out));
  ASSERT_EQ(seen.size(), masters.size()) << seen.dump();
  for (const auto& [name, master] : masters) {
    ASSERT_TRUE(seen.contains(name)) << name;
    EXPECT_EQ(seen[name][0].get<std::vector<int64_t>>(), master.sizes().vec()) << name;
    EXPECT_EQ(seen[name][1], "torch.float32") << name;
  }
}

// The command as a PatrickStar user writes it, inside a step directory: no -o. The merged file
// goes beside the shards, named after the pattern, its path printed; it is never replaced
// without --force, and a later run's pattern does not take it for a shard.
TEST_F(MergeCkptTest, WithoutOutputWritesBesideTheShardsAndPrintsThePath) {
  // The command as written: a 4-rank checkpoint of step 6.
  train_two_ranks(6, "ck", "full.jsonl", 4);
  const fs::path step = dir_.path() / "ck/step-00000006";
  const std::string config_before = read_text((step / "config.json").string());
  auto merge_in_step = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args{"merge-ckpt", "--pattern", "ckpt-*.pt", "--num", "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_pstar(args, step);
  };
  auto r = merge_in_step({});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "ckpt-merged.pt\n") << r;
  const auto masters = shard_parameters(step, 4);
  auto expect_merged = [&] {
    const checkpoint::TensorMap merged =
        checkpoint::read_checkpoint_file((step / "ckpt-merged.pt").string());
    ASSERT_EQ(merged.size(), masters.size());
    for (const auto& [name, master] : masters) {
      ASSERT_TRUE(merged.count(name)) << name;
      EXPECT_TRUE(bitwise_equal(merged.at(name), master)) << name;
    }
  };
  expect_merged();
  // The step's config.json is the run's own: left as it was, and the log says why none was
  // written for the merged file.
  EXPECT_EQ(read_text((step / "config.json").string()), config_before);
  EXPECT_TRUE(contains(r.err, "no config.json written beside ckpt-merged.pt")) << r;

  // Again: refused, the file untouched.
  write_text((step / "ckpt-merged.pt").string(), "not replaced");
  r = merge_in_step({});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "ckpt-merged.pt already exists; give --force to replace it")) << r;
  EXPECT_EQ(read_text((step / "ckpt-merged.pt").string()), "not replaced");
  // --force replaces it; ckpt-*.pt matches it too, but it is not counted as a shard.
  r = merge_in_step({"--force", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "ckpt-merged.pt\n") << r;
  expect_merged();

  // A safetensors name from the pattern, from outside the directory; and --dir's default.
  r = merge({"--pattern", "ck/step-00000006/ckpt-*.safetensors", "--num", "4"});
  EXPECT_EQ(r.exit_code, 3) << r;  // no shard matches *.safetensors
  r = merge({"--dir", "ck/step-00000006", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "ck/step-00000006/ckpt-merged.pt\n") << r;
  expect_merged();

  // Patterns that name no single place or name: -o is asked for, nothing written.
  for (const std::string pattern : {"ck/*/ckpt-*.pt", "ck/step-00000006/ckpt-?.pt",
                                    "ck/step-00000006/*-*.pt", "ck/step-00000006/ckpt-*"}) {
    r = merge({"--pattern", pattern, "--num", "4"});
    EXPECT_EQ(r.exit_code, 2) << pattern << "\n" << r;
    EXPECT_TRUE(contains(r.err, "give the output with -o")) << pattern << "\n" << r;
  }
}

}  // namespace
}  // namespace pstar::cmd
