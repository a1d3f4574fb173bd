// Renders pstar's chat test conversations with Hugging Face's own Jinja implementation
// (@huggingface/jinja, what transformers.js uses for apply_chat_template) and each model's real
// tokenizer_config.json, and tokenizes the text with the model's own tokenizer (@lenml/tokenizers
// packages), for tests/text/chat_template_real_test.cpp. Lays out each model's tokenizer files
// too. Phi-4's template is the repository's own test data (tests/data/chat/phi4, its source named
// there) and has no tokenizer here: its renderings carry no ids.
// Run by scripts/fetch-tokenizer-data.sh; not by the tests.
//
// Usage: node chat_reference.js CACHE_DIR CONVERSATIONS.json
"use strict";
const fs = require("fs");
const path = require("path");

const cacheDir = path.resolve(process.argv[2]);
const casesFile = path.resolve(process.argv[3]);
const repoDir = path.resolve(__dirname, "..", "..");
const modules = path.join(cacheDir, "npm", "node_modules");
const { Environment, Interpreter, Template } = require(path.join(modules, "@huggingface", "jinja"));

function write(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file + ".part", text);
  fs.renameSync(file + ".part", file);
}

// The families and the packages that ship their files: Llama 3 (the package's template),
// Llama 3.1 and 3.2 (Llama 3.2's template writes a date), Qwen2.5 (ChatML; an NFC normalizer),
// Qwen3 (<think> blocks, reasoning_content, enable_thinking), Gemma 3 (a system turn folded into
// the first user turn; roles must alternate). Phi-4: the folder in the repository, no package.
const families = {
  "llama3": "tokenizer-llama3",
  "llama3_1": "tokenizer-llama3_1",
  "llama3_2": "tokenizer-llama3_2",
  "qwen2_5": "tokenizer-qwen2_5",
  "qwen3": "tokenizer-qwen3",
  "gemma3": "tokenizer-gemma3",
  "phi4": null,
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

// Python's str.strip/lstrip/rstrip(chars) for @huggingface/jinja's strings. Its 0.5.11 (and
// 0.5.13) ignore the argument and strip whitespace, where Jinja2 under transformers'
// apply_chat_template strips the given characters only: Qwen3's `content.lstrip('\n')` keeps the
// spaces of "   ", which @huggingface/jinja drops (checked against Python's Jinja2 3.1.6 on every
// conversation: this is the one difference). Without an argument, or with None, its own
// whitespace strip is kept. The string class is not exported: it is reached through a value the
// environment made.
function pythonStripWithChars(env) {
  env.set("__probe", "x");
  const proto = Object.getPrototypeOf(env.variables.get("__probe"));
  env.variables.delete("__probe");
  const descriptor = Object.getOwnPropertyDescriptor(proto, "builtins");
  if (!descriptor || !descriptor.get || descriptor.get.pythonStrip) return;
  const original = descriptor.get;
  const patched = function () {
    const map = original.call(this);
    if (map.get("strip").pythonStrip) return map;
    const StringValue = this.constructor;
    const FunctionValue = map.get("strip").constructor;
    const value = this.value;
    for (const [name, left, right] of [["strip", true, true], ["lstrip", true, false],
                                       ["rstrip", false, true]]) {
      const own = map.get(name);
      const fn = new FunctionValue((args) => {
        const chars = args.length > 0 ? args[0] : undefined;
        if (!chars || chars.type !== "StringValue") return own.value(args);
        const set = new Set(Array.from(chars.value));
        const points = Array.from(value);
        let b = 0, e = points.length;
        while (left && b < e && set.has(points[b])) ++b;
        while (right && e > b && set.has(points[e - 1])) --e;
        return new StringValue(points.slice(b, e).join(""));
      });
      fn.pythonStrip = true;
      map.set(name, fn);
    }
    return map;
  };
  patched.pythonStrip = true;
  Object.defineProperty(proto, "builtins", { get: patched, configurable: true });
}

function specialToken(config, key) {
  const v = config[key];
  if (v === undefined || v === null) return "";
  return typeof v === "string" ? v : v.content;
}

const cases = JSON.parse(fs.readFileSync(casesFile, "utf8"));
let rendered = 0;
for (const [family, pkg] of Object.entries(families)) {
  const dir = pkg ? path.join(modules, "@lenml", pkg, "models")
                  : path.join(repoDir, "tests", "data", "chat", family);
  if (pkg) {
    for (const f of ["tokenizer.json", "tokenizer_config.json"]) {
      write(path.join(cacheDir, "chat", family, f), fs.readFileSync(path.join(dir, f)));
    }
  }
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const template = new Template(config.chat_template);
  const tokenizer = pkg ? require(path.join(modules, "@lenml", pkg)).fromPreTrained() : null;
  const out = [];
  for (const c of cases) {
    // Template.render's set-up with the variables pstar gives a template: strftime_now only when
    // a date is given (@huggingface/jinja's own writes today's date, which no test can fix).
    const env = new Environment();
    pythonStripWithChars(env);
    const globals = {
      false: false, true: true, none: null, False: false, True: true, None: null,
      raise_exception: (message) => { throw new Error(message); },
      messages: c.messages,
      bos_token: specialToken(config, "bos_token"),
      eos_token: specialToken(config, "eos_token"),
      add_generation_prompt: Boolean(c.add_generation_prompt),
    };
    if (c.date) globals.strftime_now = (format) => strftime(c.date, format);
    // apply_chat_template's keyword arguments (pstar's data.chat_template_kwargs), such as
    // Qwen3's enable_thinking.
    Object.assign(globals, c.chat_template_kwargs || {});
    for (const [k, v] of Object.entries(globals)) env.set(k, v);
    let result;
    try {
      const text = new Interpreter(env).run(template.parsed).value;
      result = { name: c.name, text };
      if (tokenizer) result.ids = tokenizer.encode(text, { add_special_tokens: false });
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
