// Renders pstar's chat test conversations with Hugging Face's own Jinja implementation
// (@huggingface/jinja, what transformers.js uses for apply_chat_template) and each model's real
// tokenizer_config.json, and tokenizes the text with the model's own tokenizer (@lenml/tokenizers
// packages), for tests/text/chat_template_test.cpp. Lays out each model's tokenizer files too.
// Run by scripts/fetch-tokenizer-data.sh; not by the tests.
//
// Usage: node chat_reference.js CACHE_DIR CONVERSATIONS.json
"use strict";
const fs = require("fs");
const path = require("path");

const cacheDir = path.resolve(process.argv[2]);
const casesFile = process.argv[3];
const modules = path.join(cacheDir, "npm", "node_modules");
const { Environment, Interpreter, Template } = require(path.join(modules, "@huggingface", "jinja"));

function write(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file + ".part", text);
  fs.renameSync(file + ".part", file);
}

// The families and the packages that ship their files: Llama 3 (the package's template),
// Llama 3.1 and 3.2 (Llama 3.2's template writes a date), Qwen2.5 (ChatML; an NFC normalizer).
const families = {
  "llama3": "tokenizer-llama3",
  "llama3_1": "tokenizer-llama3_1",
  "llama3_2": "tokenizer-llama3_2",
  "qwen2_5": "tokenizer-qwen2_5",
};

// Python's strftime for the few fields templates use, on a YYYY-MM-DD date at midnight.
function strftime(date, format) {
  const [y, m, d] = date.split("-").map(Number);
  const when = new Date(Date.UTC(y, m - 1, d));
  const months = ["January", "February", "March", "April", "May", "June", "July", "August",
                  "September", "October", "November", "December"];
  const days = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
  const pad = (n) => String(n).padStart(2, "0");
  const fields = {
    d: pad(d), m: pad(m), Y: String(y), y: pad(y % 100), b: months[m - 1].slice(0, 3),
    B: months[m - 1], a: days[when.getUTCDay()].slice(0, 3), A: days[when.getUTCDay()],
    H: "00", M: "00", S: "00", "%": "%",
  };
  return format.replace(/%(.)/g, (all, c) => (c in fields ? fields[c] : all));
}

function specialToken(config, key) {
  const v = config[key];
  if (v === undefined || v === null) return "";
  return typeof v === "string" ? v : v.content;
}

const cases = JSON.parse(fs.readFileSync(casesFile, "utf8"));
let rendered = 0;
for (const [family, pkg] of Object.entries(families)) {
  const dir = path.join(modules, "@lenml", pkg, "models");
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) {
    write(path.join(cacheDir, "chat", family, f), fs.readFileSync(path.join(dir, f)));
  }
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const template = new Template(config.chat_template);
  const { fromPreTrained } = require(path.join(modules, "@lenml", pkg));
  const tokenizer = fromPreTrained();
  const out = [];
  for (const c of cases) {
    // Template.render's set-up with the variables pstar gives a template: strftime_now only when
    // a date is given (@huggingface/jinja's own writes today's date, which no test can fix).
    const env = new Environment();
    const globals = {
      false: false, true: true, none: null, False: false, True: true, None: null,
      raise_exception: (message) => { throw new Error(message); },
      messages: c.messages,
      bos_token: specialToken(config, "bos_token"),
      eos_token: specialToken(config, "eos_token"),
      add_generation_prompt: Boolean(c.add_generation_prompt),
    };
    if (c.date) globals.strftime_now = (format) => strftime(c.date, format);
    for (const [k, v] of Object.entries(globals)) env.set(k, v);
    let result;
    try {
      const text = new Interpreter(env).run(template.parsed).value;
      result = { name: c.name, text, ids: tokenizer.encode(text, { add_special_tokens: false }) };
    } catch (e) {
      result = { name: c.name, error: String(e.message) };
    }
    out.push(result);
    ++rendered;
  }
  write(path.join(cacheDir, "reference", "chat", family + ".json"), JSON.stringify(out));
}
console.log(`chat references: ${rendered} renderings of ${cases.length} conversations written ` +
            `under ${cacheDir}/reference/chat`);
