#!/usr/bin/env python3
"""The summaries of scripts/gpu-verify.sh (the GPU ledger, issue 34), rewritten after every phase
so that a call stopped at its time limit still brings them back. Standard library only.

  ledger_summary.py --out OUT --work WORK --repo REPO --seconds S [--build DIR]

Reads OUT/phases.jsonl (one line per phase run or skipped), the benchmark rows WORK/<run>.jsonl
(gpt_bench.sh and llama_bench.sh lines), WORK/<phase>.log and OUT/gpu-ctest.txt. Writes to OUT:

  summary.json  every phase and every benchmark row, whole
  summary.md    the phases and one line per row (the figures people read first)
  result.json   the record kept in bench/results/: date, commit (PSTAR_COMMIT), card, driver,
                CUDA and PyTorch versions, the gpu tests' count, each run's figures, and the
                changes in tokens/s against the newest earlier record of the same card (a drop
                of more than 5% is listed under "regressions")
  tails.txt     the end of each phase's log and of each training run's log
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

REGRESSION = 0.95  # tokens/s below this fraction of the last record of the same card


def read_lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


def environment(work):
    """Card, driver and versions, asked once per work folder (torch's import takes seconds)."""
    cache = os.path.join(work, "environment.json")
    try:
        with open(cache) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    env = {"card": None, "driver": None, "gpu_memory": None, "torch": None, "cuda": None,
           "host": os.uname().nodename, "cores": os.cpu_count()}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        name, driver, memory = [x.strip() for x in smi.stdout.splitlines()[0].split(",")]
        env.update(card=name, driver=driver, gpu_memory=memory)
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired):
        pass
    python = os.environ.get("PYTHON", "python3")
    try:
        v = subprocess.run([python, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                           capture_output=True, text=True, timeout=120)
        env["torch"], env["cuda"] = v.stdout.split()[:2]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass
    with open(cache, "w") as f:
        json.dump(env, f)
    return env


def card_key(card):
    """A short name for file names and comparisons: H100, H200, ... (else the whole name)."""
    m = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", card or "")
    return m.group(1) if m else re.sub(r"[^A-Za-z0-9]+", "-", card or "unknown")


def gpu_tests(out):
    lines = tail(os.path.join(out, "gpu-ctest.txt"), 400)
    for line in lines:
        m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", line)
        if m:
            total, failed = int(m.group(3)), int(m.group(2))
            failures = [l.split("-", 1)[-1].strip() for l in lines
                        if re.match(r"\s*\d+ - .*\((Failed|Subprocess aborted|Timeout|SEGFAULT|Skipped)", l)]
            return {"passed": total - failed, "total": total, "failed": failures}
    return None


def figures(row):
    """The figures of one benchmark row that the record keeps and compares."""
    p, f, pl = row.get("pstar") or {}, row.get("fsdp2") or {}, row.get("plain") or {}
    keep = ("tokens_per_s", "tflops", "s_per_step_median", "s_per_step_min", "s_per_step_max",
            "setup_s", "step1_s", "release_s", "host_bytes_per_param", "split_s_per_step",
            "device_peak_bytes", "moved_h2d_bytes_per_step", "moved_d2h_bytes_per_step",
            "grad_norms", "adam_speculated_chunks", "adam_rolled_back_chunks",
            "exit_code", "error", "startup")
    out = {"model": row.get("model", "gpt"), "hidden": row.get("hidden"),
           "layers": row.get("layers"), "params": row.get("params"), "seq": row.get("seq"),
           "micro_batch": row.get("micro_batch"),
           "pstar": {k: p.get(k) for k in keep} if p else None,
           "fsdp2": {k: f.get(k) for k in ("tokens_per_s", "tflops", "s_per_step_median",
                                            "host_bytes_per_param", "exit_code", "error")}
           if f else None,
           "plain": {k: pl.get(k) for k in ("tokens_per_s", "tflops", "exit_code")} if pl else None,
           "ratio_vs_fsdp2": row.get("ratio_vs_fsdp2"), "ratio_vs_plain": row.get("ratio_vs_plain"),
           "params_agree": row.get("params_agree")}
    b = row.get("bound")
    if b:  # Note [step bound]: each timed step against the rates measured in the same run
        out["bound"] = {k: b.get(k) for k in ("ratio_median", "model_flops_rate",
                                              "model_flops_rate_source", "h2d_bytes_per_s",
                                              "d2h_bytes_per_s", "two_way_bytes_per_s",
                                              "host_memory_bytes_per_s")}
        out["bound"]["steps"] = [{k: s.get(k) for k in ("step", "step_s", "compute_s", "copy_s",
                                                       "host_s", "ratio", "limit")}
                                 for s in b.get("steps") or []]
    return out


def compare(runs, repo, card, exclude):
    """tokens/s against the newest earlier record of the same card, run by run and side by side."""
    records = []
    for path in glob.glob(os.path.join(repo, "bench", "results", "*.json")):
        if os.path.abspath(path) == os.path.abspath(exclude):
            continue
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError):
            continue
        if card_key(r.get("card")) == card_key(card):
            records.append((r.get("date", ""), path, r))
    if not records:
        return None, []
    _, path, last = max(records)
    changes, regressions = [], []
    for name, now in runs.items():
        before = (last.get("runs") or {}).get(name)
        if not before:
            continue
        for side in ("pstar", "fsdp2", "plain"):
            a, b = (now.get(side) or {}).get("tokens_per_s"), (before.get(side) or {}).get("tokens_per_s")
            if a and b:
                change = {"run": name, "side": side, "tokens_per_s": a, "before": b,
                          "ratio": a / b}
                changes.append(change)
                if a / b < REGRESSION:
                    regressions.append(change)
    return {"against": os.path.relpath(path, repo), "changes": changes}, regressions


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def row_line(name, row):
    p, f, pl = row.get("pstar") or {}, row.get("fsdp2") or {}, row.get("plain") or {}
    spread = "-"
    if p.get("s_per_step_median") is not None:
        spread = (f"{p['s_per_step_median']:.3f} ({p['s_per_step_min']:.3f}-"
                  f"{p['s_per_step_max']:.3f})")
    split = p.get("split_s_per_step") or {}
    split_text = " ".join(f"{k[:-2]} {v:.2f}" for k, v in split.items()) or "-"
    bound = row.get("bound") or {}
    return ("| {} | {} {}x{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
        name, row.get("model", "gpt"), row.get("hidden"), row.get("layers"),
        fmt(row.get("params"), ".3e"), fmt(p.get("tflops"), ".1f"),
        fmt(p.get("tokens_per_s"), ".0f"), spread, fmt(p.get("setup_s"), ".1f"),
        fmt(p.get("step1_s"), ".1f"), fmt(p.get("host_bytes_per_param"), ".1f"),
        fmt(f.get("tflops"), ".1f"), fmt(row.get("ratio_vs_fsdp2"), ".2f"),
        fmt(pl.get("tflops"), ".1f"), split_text, fmt(bound.get("ratio_median"), ".2f")))


# Issue 56: each clipped run's median step against the unclipped one of the same model (target:
# within 5% where clipping rarely fires, and never slower than waiting for the norm).
CLIPPED_AGAINST = (("gpt7bclip", "gpt7b"), ("gpt7bauto", "gpt7b"), ("gpt7bspec", "gpt7b"),
                   ("gpt7bspecloose", "gpt7b"), ("llama8b", "llama8bnoclip"),
                   ("llama8bspec", "llama8bnoclip"))


def clipped_lines(rows):
    def step(name):
        rs = rows.get(name) or []
        return ((rs[0].get("pstar") or {}).get("s_per_step_median") if len(rs) == 1 else None)
    out = []
    for run, base in CLIPPED_AGAINST:
        s, b = step(run), step(base)
        if s is not None and b:
            out.append(f"| {run} | {base} | {s:.3f} | {b:.3f} | {s / b:.3f} |")
    if not out:
        return []
    return ["", "| clipped run | against | s/step | its s/step | ratio |",
            "|---|---|---|---|---|"] + out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--seconds", type=int, required=True)
    ap.add_argument("--build", default="")
    a = ap.parse_args(argv)

    phases = read_lines(os.path.join(a.out, "phases.jsonl"))
    rows = {}
    for path in sorted(glob.glob(os.path.join(a.work, "*.jsonl"))):
        name = os.path.basename(path)[:-len(".jsonl")]
        if name != "phases":
            rows[name] = read_lines(path)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"total_seconds": a.seconds, "phases": phases, "benchmarks": rows}, f, indent=1)

    lines = ["| phase | status | seconds (expected) |", "|---|---|---|"]
    lines += [f"| {p['phase']} | {p['status']} | {p['seconds']} ({p.get('expected_seconds', '-')}) |"
              for p in phases]
    lines += ["", f"total: {a.seconds} s", "",
              "| run | model | params | pstar TFLOPS | tok/s | s/step median (min-max) | set-up s "
              "| step 1 s | host B/param | FSDP2 TFLOPS | pstar/FSDP2 | plain TFLOPS | split (s) "
              "| step / bound |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    runs = {}
    for name, rs in rows.items():
        for i, r in enumerate(rs):
            key = name if len(rs) == 1 else f"{name}-{r.get('hidden')}x{r.get('layers')}"
            runs[key] = figures(r)
            lines.append(row_line(key, r))
    lines += clipped_lines(rows)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    env = environment(a.work)
    record = {"date": time.strftime("%Y-%m-%d"), "commit": os.environ.get("PSTAR_COMMIT"),
              **env, "gpu_tests": gpu_tests(a.out),
              "phases": {p["phase"]: {"status": p["status"], "seconds": p["seconds"]}
                         for p in phases},
              "runs": runs}
    result_path = os.path.join(a.out, "result.json")
    record["compared"], record["regressions"] = compare(runs, a.repo, env.get("card"), result_path)
    with open(result_path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    for r in record["regressions"]:
        print(f"[ledger] regression: {r['run']} {r['side']} {r['tokens_per_s']:.0f} tok/s, "
              f"{r['ratio']:.3f} of {r['before']:.0f} in {record['compared']['against']}",
              file=sys.stderr)

    with open(os.path.join(a.out, "tails.txt"), "w") as f:
        for p in phases:
            f.write(f"===== {p['phase']} ({p['status']}, {p['seconds']} s)\n")
            f.write("\n".join(tail(os.path.join(a.work, p["phase"] + ".log"), 40)) + "\n")
            for log in sorted(glob.glob(os.path.join(a.work, p["phase"], "*", "*.log"))):
                f.write(f"----- {os.path.relpath(log, a.work)}\n")
                f.write("\n".join(tail(log, 25)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
