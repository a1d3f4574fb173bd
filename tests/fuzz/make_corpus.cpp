// Writes the seed corpora of the fuzz targets into DIR/<target>/ (tests/fuzz/corpus in the
// repository): small valid files made by pstar's own writers, plus a few edge cases. Built in the
// fuzz tree; rerun it when a format changes:
//   build/fuzz/tests/fuzz/pstar_fuzz_make_corpus tests/fuzz/corpus
// Seeds are kept small (a few KiB each; HDF5 files are larger) so that the fuzzer mutates them
// quickly. Inputs that once crashed a reader (crash-*, libtorch-*, manifest-float-number.json) are
// kept in the corpus by hand; this program does not write them. The HDF5 seeds differ byte by byte
// from run to run (HDF5 records object times), the others are the same.
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/checkpoint/store.h"
#include "pstar/formats/config.h"
#include "pstar/formats/profile.h"
#include "pstar/formats/record_file.h"
#include "pstar/formats/safetensors.h"
#include "pstar/formats/token_file.h"

namespace {

namespace fs = std::filesystem;
using namespace pstar;

fs::path g_root;

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw IoError("cannot write " + (dir / name).string());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Seeds written through a writer that takes a path: written to a scratch file, then copied.
fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("pstar-seed-" + name);
}

void config_seeds() {
  write_seed("config", "minimal.json", R"({"data": {"text": "corpus.txt"}})");
  write_seed("config", "example.json",
             read_file(fs::path(PSTAR_SOURCE_DIR) / "examples/default/config.json"));
  config::TrainConfig every_key;
  every_key.data.path = "/data/tokens.bin";
  every_key.model.preset = "gpt2";
  every_key.model.hidden = 64;
  every_key.train_batch_size = 4;
  every_key.engine.device_memory = int64_t{1} << 30;
  write_seed("config", "every_key.json", config::to_json_text(every_key));
  // The text after a line "---": one --set argument per line (config_fuzz.cpp).
  write_seed("config", "overrides.json",
             "{\"data\": {\"path\": \"t.bin\", \"dtype\": \"uint32\"}}\n---\n"
             "optimizer.params.lr=3e-4\n"
             "optimizer.params.betas=[0.9,0.95]\n"
             "model.preset=gpt2\n"
             "bf16.enabled=auto\n"
             "engine.device_memory=192MiB\n"
             "training.lr_schedule.type=\"constant\"\n"
             "data.sampling=sequential");
  write_seed(
      "config", "batch.json",
      R"({"_comment": "x", "//": 1, "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,)"
      R"( "gradient_accumulation_steps": 2, "fp16": {"enabled": true, "loss_scale": 0},)"
      R"( "data": {"text": "a.txt"}, "model": {"hidden": 96, "heads": 3, "seq_len": 1e3}})");
  write_seed("config", "unknown_key.json", R"({"data": {"text": "a"}, "optimiser": {}, "lr": 1})");
  write_seed("config", "not_object.json", "[1, 2, {\"a\": null}]");
  write_seed("config", "invalid.json", "{\"data\": {\"text\": \"a\"},}");
  write_seed("config", "bad_override.json", "{}\n---\ndata=1\ndata.text.x=2\n=3\na..b=4");
  // Nesting just past the parser's depth limit (Note [JSON depth] in config.cpp), in the file and
  // in a --set value.
  const std::string deep = std::string(120, '[') + std::string(120, ']');
  write_seed("config", "deep.json",
             "{\"data\": {\"text\": \"a\"}, \"training\": {\"steps\": " + deep + "}}");
  write_seed("config", "deep_override.json",
             "{\"data\": {\"text\": \"a\"}}\n---\ntraining.seed=" + deep);
}

void safetensors_seeds() {
  formats::SafetensorsWriter w;
  const std::vector<float> f32 = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, 7.0f};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x0000};
  const std::vector<int64_t> i64 = {-1, 0, 1 << 20};
  const uint8_t flags[2] = {1, 0};
  w.add("transformer.wte.weight", formats::DType::kF32, {2, 3}, f32.data(), 24);
  w.add("h.0.ln_1.bias", formats::DType::kBF16, {3}, bf16.data(), 6);
  w.add("step", formats::DType::kI64, {}, i64.data(), 8);
  w.add("ids", formats::DType::kI64, {3}, i64.data(), 24);
  w.add("mask", formats::DType::kBool, {2}, flags, 2);
  w.add("empty", formats::DType::kF16, {0, 4}, nullptr, 0);
  w.set_metadata("format", "pt");
  const std::vector<uint8_t> bytes = w.serialize();
  write_seed("safetensors", "tensors.safetensors", std::string(bytes.begin(), bytes.end()));

  formats::SafetensorsWriter only_metadata;
  only_metadata.set_metadata("k", "v");
  const std::vector<uint8_t> m = only_metadata.serialize();
  write_seed("safetensors", "metadata_only.safetensors", std::string(m.begin(), m.end()));

  // Edge cases: an empty header, a header length past the end, overlapping tensors.
  auto raw = [](const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + data;
  };
  write_seed("safetensors", "empty_header.safetensors", raw("{}      ", ""));
  std::string past_end = raw("{}", "");
  past_end[0] = 100;
  write_seed("safetensors", "length_past_end.safetensors", past_end);
  write_seed("safetensors", "deep.safetensors",
             raw(R"({"w":{"dtype":)" + std::string(70, '[') + std::string(70, ']') +
                     R"(,"shape":[1],"data_offsets":[0,1]}})",
                 "x"));
  write_seed("safetensors", "overlap.safetensors",
             raw(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                 R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
                 "abc"));
}

void token_seeds() {
  const fs::path u16 = scratch("u16.bin");
  formats::write_token_file(u16.string(), formats::TokenDType::kU16, {0, 1, 255, 256, 65535, 7});
  write_seed("token_file", "u16.bin", read_file(u16));
  fs::remove(u16);
  const fs::path u32 = scratch("u32.bin");
  formats::write_token_file(u32.string(), formats::TokenDType::kU32,
                            {50256, 0, 70000, 4294967295u});
  write_seed("token_file", "u32.bin", read_file(u32));
  fs::remove(u32);
  write_seed("token_file", "empty.bin", "");
  write_seed("token_file", "odd.bin", "abc");
}

void record_seeds() {
  using formats::record_token;
  const fs::path file = scratch("r.records");
  {
    formats::RecordFileWriter w(file.string());
    w.add({record_token(300, false), record_token(72, false), record_token(257, true),
           record_token(303, true)},
          1);
    w.add({}, 3);
    w.add({record_token(16777215, true)}, 4);
    w.commit(R"({"lines": 4})");
  }
  const std::string bytes = read_file(file);
  write_seed("record_file", "records.records", bytes);
  {
    formats::RecordFileWriter w(file.string());
    w.commit("");
  }
  write_seed("record_file", "empty.records", read_file(file));
  fs::remove(file);
  write_seed("record_file", "header_only.records", bytes.substr(0, 64));
  write_seed("record_file", "short.records", "PSTARREC");

  // JSON Lines records (records_fuzz.cpp): every shape, and some bad ones.
  write_seed("records", "conversation.jsonl",
             R"({"messages": [{"role": "system", "content": "Be brief."}, )"
             R"({"role": "user", "content": "Capital?"}, )"
             R"({"role": "assistant", "content": " Paris "}, )"
             R"({"role": "user", "content": "Café?"}, )"
             R"({"role": "assistant", "content": ""}]})");
  write_seed("records", "pair.jsonl", R"({"prompt": "The capital?", "completion": " Paris"})");
  write_seed("records", "text.jsonl", R"({"text": "café <|end|> the", "id": 3})");
  write_seed("records", "bad_role.jsonl", R"({"messages": [{"role": "tool", "content": "x"}]})");
  write_seed("records", "invalid_utf8.jsonl", "{\"text\": \"caf\xe9\"}");
}

void profile_seeds() {
  formats::Profile p;
  p.run.config_json = R"({"model": {"preset": "gpt-mini"}})";
  p.run.pstar_version = "0.1.0";
  p.run.torch_version = "1.13.1";
  p.run.created = "2024-01-01T00:00:00Z";
  p.run.precision = "fp32";
  p.run.chunk_size = 1024;
  p.run.num_chunks = 2;
  p.run.steps = 1;
  p.chunks.id = {0, 1};
  p.chunks.numel = {1000, 24};
  p.chunks.capacity = {1024, 1024};
  p.chunks.group = {0, 0};
  p.chunks.owner = {0, 0};
  p.chunks.embedding = {1, 0};
  p.chunks.payloads = {"param+grad,master", "param+grad"};
  auto& m = p.by_moment;
  m.step = {0, 0};
  m.moment = {0, 1};
  m.name = {"forward of wte", "backward of wte"};
  m.stage = {0, 1};
  m.time_s = {0.0, 0.5};
  m.device_total = {10, 20};
  m.device_chunks = {4, 8};
  m.device_non_model = {6, 12};
  m.host_total = {1, 2};
  m.host_chunks = {1, 2};
  m.host_non_model = {0, 0};
  auto& t = p.by_time;
  t.stage = {2};
  t.time_s = {0.25};
  t.device_total = {5};
  t.device_chunks = {4};
  t.device_non_model = {1};
  t.host_total = {1};
  t.host_chunks = {1};
  t.host_non_model = {0};
  auto& e = p.events;
  e.time_s = {0.1, 0.2};
  e.step = {0, 0};
  e.moment = {0, -1};
  e.chunk = {1, 0};
  e.kind = {0, 5};
  e.bytes = {4096, 0};
  e.duration_s = {0.01, 0.02};
  p.location = {1, 2, 2, 1};
  auto& s = p.steps;
  s.step = {0};
  s.time_s = {1.0};
  s.forward_s = {0.4};
  s.backward_s = {0.5};
  s.optimizer_s = {0.1};
  s.loss = {5.5};
  s.device_peak_bytes = {20};
  s.host_peak_bytes = {2};
  s.moved_h2d_bytes = {4096};
  s.moved_d2h_bytes = {0};
  const fs::path tiny = scratch("tiny.h5");
  formats::write_profile(tiny.string(), p);
  const std::string tiny_bytes = read_file(tiny);
  write_seed("profile", "tiny.h5", tiny_bytes);
  // Edge cases: every table empty; a valid file cut short; not HDF5 at all.
  const fs::path empty = scratch("empty.h5");
  formats::write_profile(empty.string(), formats::Profile{});
  write_seed("profile", "empty.h5", read_file(empty));
  fs::remove(tiny);
  fs::remove(empty);
  write_seed("profile", "truncated.h5", tiny_bytes.substr(0, 2048));
  write_seed("profile", "not_hdf5.h5", "pstar-profile\n");
  // Tamper scripts (profile_fuzz.cpp): the bytes choose a profile and the edits made to it. All
  // zeros: an empty profile, no edits; then pseudo-random bytes of a few lengths.
  write_seed("profile", "script-zeros.bin", std::string(64, '\0'));
  uint32_t state = 12345;
  for (size_t length : {48, 160, 600}) {
    std::string script(length, '\0');
    for (char& c : script) {
      state = state * 1664525u + 1013904223u;  // a fixed LCG: the same seeds on every run
      c = static_cast<char>(state >> 24);
    }
    write_seed("profile", "script-" + std::to_string(length) + ".bin", script);
  }
}

void checkpoint_seeds() {
  const fs::path file = scratch("ckpt-0.pt");
  checkpoint::write_checkpoint_file(
      file.string(),
      {{"transformer.wte.weight", torch::arange(6, torch::kFloat32).reshape({2, 3})},
       {"transformer.wte.weight.exp_avg", torch::zeros({2, 3})},
       {"__pstar__.step", torch::tensor(int64_t{7})},
       {"h.0.attn.bias", torch::ones({3}, torch::kBFloat16)},
       {"__pstar__.rng", torch::tensor(std::vector<uint8_t>{1, 2, 3, 4}, torch::kUInt8)},
       {"empty", torch::empty({0, 2}, torch::kFloat64)}});
  const std::string zip = read_file(file);
  write_seed("checkpoint", "ckpt-0.pt", zip);

  // The same archive as its contents (checkpoint_fuzz.cpp): the pickle, then each tensor record.
  caffe2::serialize::PyTorchStreamReader reader(file.string());
  std::string contents;
  const auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  contents.assign(static_cast<const char*>(pickle.get()), pickle_size);
  for (int i = 0; reader.hasRecord("data/" + std::to_string(i)); ++i) {
    const auto [record, size] = reader.getRecord("data/" + std::to_string(i));
    contents += "\n@record@\n" + std::string(static_cast<const char*>(record.get()), size);
  }
  write_seed("checkpoint", "contents.bin", contents);
  fs::remove(file);

  // Edge cases: a zip cut short, and manifests (every input is also tried as manifest.json).
  write_seed("checkpoint", "truncated.pt", zip.substr(0, zip.size() / 2));
  const fs::path dir = scratch("manifest");
  fs::create_directories(dir);
  checkpoint::CheckpointManifest manifest;
  manifest.world_size = 2;
  manifest.step = 100;
  manifest.run_id = "run-1234";
  checkpoint::write_manifest(dir.string(), manifest);
  write_seed("checkpoint", "manifest.json", read_file(dir / "manifest.json"));
  fs::remove_all(dir);
  write_seed("checkpoint", "manifest_bad.json", R"({"world_size": 0, "step": "x"})");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  try {
    config_seeds();
    safetensors_seeds();
    token_seeds();
    record_seeds();
    profile_seeds();
    checkpoint_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_corpus: %s\n", e.what());
    return 1;
  }
  std::printf("wrote seeds under %s\n", argv[1]);
  return 0;
}
