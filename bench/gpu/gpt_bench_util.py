#!/usr/bin/env python3
"""Helpers of gpt_bench.sh (standard library only): the token file, pstar's config, running a
command with its memory peaks measured, and the JSON line of one model size.

  tokens PATH --count N --vocab V [--seed S]
  config PATH --hidden H --layers L --heads A --vocab V --seq S --micro-batch B --steps N
         --tokens PATH --device-memory SIZE [--host-memory SIZE] [--clip C] [--model JSON]
  measure RESULT.json [--timeout S] [--gpus N] -- COMMAND ...
  estimate-layers ESTIMATE.json
  rates-line RATES.json
  rate-config CONFIG.json OUT.json
  row DIR --hidden H --layers L --vocab V --seq S --micro-batch B --skip K [--largest JSON]
      [--hf-config CONFIG.json] [--rates RATES.json] [--nproc N]

Token files hold uint16 ids for vocabularies up to 65536 and uint32 above (config follows).
--model replaces the config's GPT model section with a JSON object (a Llama preset or a Hugging
Face folder, {"preset": ..., "seq_len": ...}); row --hf-config counts that model's parameters
and FLOPs from its Hugging Face shape (llama_reference.py) instead of the GPT formula.
"""

import argparse
import array
import json
import os
import random
import re
import statistics
import sys

import run_measure
import step_bound


def expected_params(hidden, layers, vocab, seq):
    """pstar's count (GptConfig::num_params); fsdp2_reference.py checks its model against it."""
    h = hidden
    return layers * (12 * h * h + 13 * h) + vocab * h + seq * h + 2 * h


def flops_per_token(params, layers, hidden, seq):
    """The issue's model FLOPs per token (recomputation not counted)."""
    return 6 * params + 12 * layers * hidden * seq


def token_dtype(vocab):
    return "uint16" if vocab <= 65536 else "uint32"


def cmd_tokens(a):
    # Uniform random ids: the loss stays near ln(vocab), and the work per step is the same as
    # for real text. Modulo bias does not matter here.
    rng = random.Random(a.seed)
    code = "H" if token_dtype(a.vocab) == "uint16" else "I"
    ids = array.array(code, (rng.randrange(a.vocab) for _ in range(a.count)))
    if sys.byteorder != "little":
        ids.byteswap()
    with open(a.path, "wb") as f:
        ids.tofile(f)


def cmd_config(a):
    engine = {"mode": "chunked", "activation_checkpointing": True,
              "device_memory": a.device_memory}
    if a.host_memory:
        engine["host_memory"] = a.host_memory
    config = {
        "_comment": "Written by bench/gpu/gpt_bench.sh or llama_bench.sh: training throughput on synthetic tokens.",
        "train_micro_batch_size_per_gpu": a.micro_batch,
        "gradient_accumulation_steps": 1,
        # fsdp2_reference.py's AdamW: one group, weight decay 0.01 on every parameter.
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                 "weight_decay": 0.01}},
        "bf16": {"enabled": True},
        "gradient_clipping": a.clip,
        "model": json.loads(a.model) if a.model else
                 {"type": "gpt", "hidden": a.hidden, "layers": a.layers, "heads": a.heads,
                  "vocab_size": a.vocab, "seq_len": a.seq},
        "data": {"path": os.path.abspath(a.tokens), "dtype": token_dtype(a.vocab),
                 "sampling": "random"},
        "training": {"steps": a.steps, "log_interval": 1, "save_interval": 0,
                     "lr_schedule": {"type": "constant", "warmup_steps": 0}},
        "engine": engine,
    }
    with open(a.path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def cmd_measure(a):
    if not a.command:
        sys.exit("gpt_bench_util measure: no command after --")
    result = run_measure.measure(a.command, a.timeout, a.gpus)
    with open(a.result, "w") as f:
        json.dump(result, f)
        f.write("\n")
    return result["exit_code"]


def cmd_estimate_layers(a):
    with open(a.path) as f:
        print(json.load(f)["model"]["layers"])


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_last_json_line(path):
    """The reference prints one JSON line; anything else on stdout is ignored."""
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.startswith("{")]
    except OSError:
        return None
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def last_error_line(log_path):
    try:
        with open(log_path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if "error" in line.lower() or "Traceback" in line or "Killed" in line:
            return line.strip()[:400]
    return lines[-1].strip()[:400] if lines else None


def pstar_params_from_log(log_path):
    try:
        with open(log_path, errors="replace") as f:
            m = re.search(r"\] model: \S+ parameters \((\d+)\)", f.read())
    except OSError:
        return None
    return int(m.group(1)) if m else None


def seconds_from_log(log_path, pattern):
    """The seconds in pstar train's log line matching PATTERN (one group), or None."""
    try:
        with open(log_path, errors="replace") as f:
            m = re.search(pattern, f.read())
    except OSError:
        return None
    return float(m.group(1)) if m else None


def pstar_records(d):
    """The metrics file's records (none when it is missing or damaged)."""
    try:
        with open(os.path.join(d, "pstar.metrics.jsonl")) as f:
            return [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []


def pstar_figures(d, a, params, fpt):
    measure = read_json(os.path.join(d, "pstar.measure.json"))
    if measure is None:
        return None
    records = pstar_records(d)
    # Step records have a step time; anything else (a start-up record) is kept aside whole.
    steps = [r for r in records if "step_time_s" in r]
    startup = [r for r in records if "step_time_s" not in r]
    log = os.path.join(d, "pstar.log")
    logged = pstar_params_from_log(log)
    out = {"exit_code": measure["exit_code"], "timed_out": measure["timed_out"],
           "error": None if measure["exit_code"] == 0 else last_error_line(log),
           "params_logged": logged, "steps_done": len(steps), "steps_timed": 0,
           "tokens_per_s": None, "tflops": None, "s_per_step": None, "s_per_step_median": None,
           "s_per_step_min": None, "s_per_step_max": None, "loss_first": None,
           "loss_last": None,
           # trainer_run.cpp's lines: everything before step 1, and releasing the engine's
           # memory after the last (logged only from 1 s on: null with exit code 0 means less).
           "setup_s": seconds_from_log(log, r"set-up took ([0-9.]+) s"),
           "release_s": seconds_from_log(log, r"released the engine's memory in ([0-9.]+) s"),
           "step1_s": steps[0]["step_time_s"] if steps else None,
           "startup": startup[0] if startup else None,
           "host_peak_bytes": measure["host_peak_bytes"],
           "host_bytes_per_param": measure["host_peak_bytes"] / params,
           "gpu_used_peak_bytes": measure["gpu_used_peak_bytes"],
           "device_peak_bytes": None, "device_reserved_peak_bytes": None,
           "device_syncs_per_step": None, "host_chunk_peak_bytes": None, "model_data_bytes": None,
           "moved_h2d_bytes_per_step": None, "moved_d2h_bytes_per_step": None,
           "prefetched_h2d_bytes_per_step": None, "adam_device_chunks": None,
           "adam_queued_chunks": None, "adam_early_chunks": None, "adam_wait_s_per_step": None,
           "grad_norms": None, "adam_speculated_chunks": None, "adam_rolled_back_chunks": None,
           "split_s_per_step": None, "wall_s": measure["wall_s"]}
    if steps:
        out["loss_first"], out["loss_last"] = steps[0]["loss"], steps[-1]["loss"]
        for key, src in (("device_peak_bytes", "device_peak_bytes"),
                         ("device_reserved_peak_bytes", "device_reserved_peak_bytes"),
                         ("host_chunk_peak_bytes", "host_peak_bytes")):
            vals = [s[src] for s in steps if s.get(src) is not None]
            out[key] = max(vals) if vals else None
        out["model_data_bytes"] = steps[-1].get("model_data_bytes")
        out["adam_device_chunks"] = steps[-1].get("adam_device_chunks")
        out["adam_queued_chunks"] = steps[-1].get("adam_queued_chunks")
        out["adam_early_chunks"] = steps[-1].get("adam_early_chunks")
    # The first --warmup steps are the chunk engine's tracing iteration and its first planned
    # step; the rest is steady state.
    timed = steps[a.skip:]
    if timed:
        times = [s["step_time_s"] for s in timed]
        mean = sum(times) / len(times)
        # Every rank trains a micro-batch of its own each step (the global batch).
        tokens_per_step = a.micro_batch * a.seq * a.nproc
        out.update({
            "steps_timed": len(timed), "s_per_step": mean,
            "s_per_step_median": statistics.median(times), "s_per_step_min": min(times),
            "s_per_step_max": max(times),
            "tokens_per_s": tokens_per_step / mean,
            "moved_h2d_bytes_per_step": sum(s.get("moved_h2d_bytes", 0) for s in timed) / len(timed),
            "moved_d2h_bytes_per_step": sum(s.get("moved_d2h_bytes", 0) for s in timed) / len(timed),
            "prefetched_h2d_bytes_per_step":
                sum(s.get("prefetched_h2d_bytes", 0) for s in timed) / len(timed),
        })
        syncs = [s["device_syncs"] for s in timed if s.get("device_syncs") is not None]
        out["device_syncs_per_step"] = sum(syncs) / len(syncs) if syncs else None
        waits = [s["adam_wait_s"] for s in timed if s.get("adam_wait_s") is not None]
        out["adam_wait_s_per_step"] = sum(waits) / len(waits) if waits else None
        # Note [speculative adam]: whether the timed steps clipped is read off their norms, and
        # what speculation did from its counts (absent from the metrics when it is off).
        out["grad_norms"] = [s.get("grad_norm") for s in timed]
        for key in ("adam_speculated_chunks", "adam_rolled_back_chunks"):
            vals = [s[key] for s in timed if s.get(key) is not None]
            out[key] = sum(vals) if vals else None
        # Note [step split] (train/trainer_step.cpp): the training thread's parts of a step, and
        # inside them its time in chunk moves and waiting for queued host Adam; mean per step.
        split = {}
        for key in ("forward_s", "backward_s", "optimizer_s", "move_s", "adam_wait_s"):
            vals = [s[key] for s in timed if s.get(key) is not None]
            if vals:
                split[key] = sum(vals) / len(vals)
        out["split_s_per_step"] = split or None
        out["tflops"] = fpt * out["tokens_per_s"] / a.nproc / 1e12  # per GPU
    return out


REFERENCE_KEYS = ("impl", "exit_code", "error", "tokens_per_s", "tflops", "s_per_step",
                  "s_per_step_median", "s_per_step_min", "s_per_step_max", "host_peak_bytes",
                  "host_bytes_per_param", "gpu_peak_bytes", "gpu_reserved_peak_bytes",
                  "gpu_used_peak_bytes", "loss_first", "loss_last", "params", "attention",
                  "torch_version", "device_name", "dry_run")


def reference_figures(d, name, params):
    """fsdp2_reference.py's JSON line (NAME.json) with its run's exit code and GPU use."""
    ref = read_last_json_line(os.path.join(d, name + ".json"))
    measure = read_json(os.path.join(d, name + ".measure.json"))
    if ref is None and measure is None:
        return None
    out = {k: None for k in REFERENCE_KEYS}
    out.update({k: v for k, v in (ref or {}).items() if k in REFERENCE_KEYS})
    if ref and "experts_implementation" in ref:  # transformers' expert kernel (--model hf)
        out["experts_implementation"] = ref["experts_implementation"]
    if measure is not None:
        out["exit_code"] = measure["exit_code"]
        out["gpu_used_peak_bytes"] = measure["gpu_used_peak_bytes"]
        if out["host_peak_bytes"] is None:  # killed before it could report (host OOM)
            out["host_peak_bytes"] = measure["host_peak_bytes"]
            out["host_bytes_per_param"] = measure["host_peak_bytes"] / params
        if ref is None or measure["exit_code"] != 0 and out["error"] is None:
            out["error"] = last_error_line(os.path.join(d, name + ".log"))
    else:
        out["exit_code"] = 0 if ref is not None else None
    return out


def estimate_figures(d, a, params, fpt):
    est = read_json(os.path.join(d, "estimate.json"))
    if est is None:
        return None
    t = est.get("time") or {}
    tokens = t.get("tokens_per_s")
    mem = est.get("memory") or {}
    return {
        "fits": est.get("fits"), "reason": est.get("reason") or None,
        "tokens_per_s": tokens, "s_per_step": t.get("step_s"),
        # The formula per GPU, so that it reads beside the measured figure (estimate's
        # own tflops_per_gpu counts 8·P FLOPs per token with checkpointing); its tokens/s count
        # every GPU of --gpus-per-node.
        "tflops": None if tokens is None else fpt * tokens / a.nproc / 1e12,
        "host_used_bytes": (mem.get("host") or {}).get("used"),
        "gpu_used_bytes": (mem.get("gpu") or {}).get("used"),
        "chunks": est.get("chunks"),
    }


def ratio(x, y):
    if not x or not y or x.get("tokens_per_s") is None or y.get("tokens_per_s") is None:
        return None
    return x["tokens_per_s"] / y["tokens_per_s"]


def hf_figures(path, seq):
    """(config, parameters, parameters active a token, FLOPs per token) of a config.json: a
    Llama-family one keeps llama_shape's figures (those of the ledger's earlier rows); any other
    family pstar trains (Qwen3, Gemma 3, Phi-4, Mixtral, Qwen3-MoE) gets hf_shape's, counted as
    pstar counts them."""
    import llama_shape
    try:
        c = llama_shape.read_config(path)
        params = llama_shape.expected_params(c)
        return c, params, params, llama_shape.flops_per_token(c, params, seq)
    except ValueError:
        import hf_shape
        c = hf_shape.load(path)
        return c, hf_shape.params(c), hf_shape.params(c, active=True), hf_shape.flops_per_token(c, seq)


def cmd_row(a):
    d = a.dir
    model = "gpt"
    active = None
    if a.hf_config:
        c, params, active, fpt = hf_figures(a.hf_config, a.seq)
        model = c["model_type"]
        a.hidden, a.layers, a.heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
        a.vocab = c["vocab_size"]
    else:
        params = expected_params(a.hidden, a.layers, a.vocab, a.seq)
        fpt = flops_per_token(params, a.layers, a.hidden, a.seq)
    row = {"bench": "gpt_offload", "model": model, "hidden": a.hidden, "layers": a.layers,
           "heads": max(1, a.hidden // 128) if a.heads is None else a.heads, "params": params,
           "seq": a.seq, "micro_batch": a.micro_batch, "vocab": a.vocab, "nproc": a.nproc,
           "flops_per_token": fpt, "dry_run": a.dry_run}
    if active is not None and active != params:
        row["active_params"] = active  # a mixture of experts: FLOPs count these, memory all
    row["pstar"] = pstar_figures(d, a, params, fpt)
    row["fsdp2"] = reference_figures(d, "fsdp2", params)
    row["plain"] = reference_figures(d, "plain", params)
    row["ratio_vs_fsdp2"] = ratio(row["pstar"], row["fsdp2"])
    row["ratio_vs_plain"] = ratio(row["pstar"], row["plain"])
    row["estimate"] = estimate_figures(d, a, params, fpt)
    counts = {"formula": params}
    if row["pstar"] and row["pstar"]["params_logged"] is not None:
        counts["pstar"] = row["pstar"]["params_logged"]
    for name in ("fsdp2", "plain"):
        if row[name] and row[name]["params"] is not None:
            counts[name] = row[name]["params"]
    row["params_agree"] = len(set(counts.values())) == 1
    if not row["params_agree"]:
        print(f"[gpt_bench] parameter counts differ: {counts}", file=sys.stderr)
    if a.largest:
        row["largest"] = json.loads(a.largest)
    row["bound"] = bound_figures(d, a, fpt, row)
    print(json.dumps(row), flush=True)
    label = f"[gpt_bench] {a.hidden}x{a.layers}"
    print(f"{label} ({params / 1e9:.2f}B): " + summary(row), file=sys.stderr)
    for line in step_bound.lines(label, row["bound"]):
        print(line, file=sys.stderr)


def bound_figures(d, a, fpt, row):
    """Note [step bound]: pstar's timed steps against the rates measured in the same run. The
    model-FLOPs rate is the plain reference's at this size when it ran, else its run at the
    largest size that fits (plain-rate.json, same width, fewer layers)."""
    rate, source = None, None
    for name, ref in (("plain", row["plain"]),
                      ("plain-rate", read_last_json_line(os.path.join(d, "plain-rate.json")))):
        if ref and ref.get("tflops") and not ref.get("dry_run"):
            rate, source = ref["tflops"] * 1e12, name
            break
    rates = read_json(a.rates) if a.rates else None
    steps = [r for r in pstar_records(d) if "step_time_s" in r][a.skip:]
    # Rank 0's step: its own micro-batch on its own GPU, and its copies over its own link; host
    # Adam shares the host's memory with the other ranks of the node (ranks_per_host).
    return step_bound.figures(steps, rates, fpt * a.micro_batch * a.seq, rate, source,
                              ranks_per_host=a.nproc)


def summary(row):
    """One line for people: tokens/s and TFLOPS of each side, and the ratios."""
    def side(name):
        r = row[name]
        if r is None:
            return None
        if r.get("dry_run"):
            return f"{name} dry run ({r['params']} parameters)"
        if r.get("tokens_per_s") is None:
            return f"{name} failed (exit {r.get('exit_code')}): {r.get('error')}"
        spread = ""
        if r.get("s_per_step_min") is not None and r.get("s_per_step_max") is not None:
            spread = (f" (median {r['s_per_step_median']:.3f}, {r['s_per_step_min']:.3f}-"
                      f"{r['s_per_step_max']:.3f})")
        per_gpu = "/GPU" if row["nproc"] > 1 else ""
        return (f"{name} {r['tokens_per_s']:.0f} tok/s {r['tflops']:.1f} TFLOPS{per_gpu} "
                f"{r['s_per_step']:.3f} s/step{spread}, host {r['host_bytes_per_param']:.1f} B/param")
    parts = [p for p in map(side, ("pstar", "fsdp2", "plain")) if p]
    for key in ("ratio_vs_fsdp2", "ratio_vs_plain"):
        if row[key] is not None:
            parts.append(f"{key} {row[key]:.2f}")
    bound = row.get("bound") or {}
    if bound.get("ratio_median") is not None:
        parts.append(f"pstar step / bound median {bound['ratio_median']:.2f}")
    split = (row["pstar"] or {}).get("split_s_per_step")
    if split:
        parts.append("pstar split " + " ".join(f"{k[:-2]} {v:.3f}" for k, v in split.items()))
    p = row["pstar"] or {}
    if p.get("setup_s") is not None:
        step1 = p.get("step1_s")
        parts.append(f"pstar set-up {p['setup_s']:.1f} s" +
                     (f", step 1 {step1:.1f} s" if step1 is not None else ""))
    est = row["estimate"]
    if est and est.get("tokens_per_s") is not None:
        parts.append(f"estimate {'fits' if est['fits'] else 'does not fit'}, "
                     f"{est['tokens_per_s']:.0f} tok/s")
    return "; ".join(parts) if parts else "nothing ran"


def cmd_rate_config(a):
    """Note [step bound]: a copy of a Llama-family config.json with the most layers (at most its
    own) whose plain PyTorch run fits in 48 GB at 16 bytes per parameter; prints that count (0:
    none fits, nothing written)."""
    import llama_shape
    with open(a.config) as f:
        raw = json.load(f)
    c = llama_shape.read_config_dict(raw)
    fits = [l for l in range(1, c["num_hidden_layers"] + 1)
            if 16 * llama_shape.expected_params(dict(c, num_hidden_layers=l)) <= 48e9]
    if fits:
        raw["num_hidden_layers"] = max(fits)
        with open(a.out, "w") as f:
            json.dump(raw, f, indent=2)
    print(max(fits) if fits else 0)


def cmd_rates_line(a):
    r = read_json(a.path) or {}
    def gb(key):
        v = r.get(key)
        return "n/a" if v is None else f"{v / 1e9:.1f}"
    print(f"pinned copies {gb('h2d_bytes_per_s')} GB/s up, {gb('d2h_bytes_per_s')} down, "
          f"{gb('two_way_bytes_per_s')} both at once; host memory {gb('host_memory_bytes_per_s')} "
          f"GB/s ({r.get('threads')} threads)")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("tokens")
    t.add_argument("path")
    t.add_argument("--count", type=int, required=True)
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--seed", type=int, default=1234)

    c = sub.add_parser("config")
    c.add_argument("path")
    for name in ("--hidden", "--layers", "--heads", "--vocab", "--seq", "--micro-batch",
                 "--steps"):
        c.add_argument(name, type=int, required=True)
    c.add_argument("--tokens", required=True)
    c.add_argument("--device-memory", required=True)
    c.add_argument("--host-memory", default="")
    c.add_argument("--clip", type=float, default=0.0, help="gradient_clipping (default 0: off)")
    c.add_argument("--model", default="", help="the config's model section, as a JSON object")

    m = sub.add_parser("measure")
    m.add_argument("result")
    m.add_argument("--timeout", type=float, default=0)
    m.add_argument("--gpus", type=int, default=1, help="GPUs whose memory use is sampled")

    e = sub.add_parser("estimate-layers")
    e.add_argument("path")

    r = sub.add_parser("row")
    r.add_argument("dir")
    for name in ("--hidden", "--layers", "--vocab", "--seq", "--micro-batch", "--skip"):
        r.add_argument(name, type=int, required=True)
    r.add_argument("--heads", type=int, default=None)
    r.add_argument("--nproc", type=int, default=1,
                   help="GPUs (ranks) of the runs: tokens/s counts all, TFLOPS are per GPU")
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--largest", default="", help="a JSON object for the row's 'largest' key")
    r.add_argument("--hf-config", default="", help="a Llama-family model's config.json")
    r.add_argument("--rates", default="", help="machine_rates.py's JSON line (the step bound)")

    rc = sub.add_parser("rate-config")
    rc.add_argument("config")
    rc.add_argument("out")

    rl = sub.add_parser("rates-line")
    rl.add_argument("path")

    # measure's command follows "--" and keeps all its options.
    command = []
    if "--" in argv:
        command = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    a = p.parse_args(argv)
    a.command = command
    if a.cmd == "tokens":
        return cmd_tokens(a)
    return {"config": cmd_config, "measure": cmd_measure, "estimate-layers": cmd_estimate_layers,
            "row": cmd_row, "rates-line": cmd_rates_line,
            "rate-config": cmd_rate_config}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
