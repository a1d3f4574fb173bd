"""Each timed step of a pstar run against its physical bound (Note [step bound] in
libengine/include/pstar/train/step_bound.h), for gpt_bench_util.py's rows. Standard library only.

The bound is the largest of three terms, each assuming the other two hidden behind it:
  compute    model FLOPs per token x the step's tokens over the model-FLOPs rate plain PyTorch
             reached with the same activation checkpointing on the same GPU, in the same run;
  copies     the larger of (the larger direction's bytes over that direction's pinned rate) and
             (both directions' bytes over the rate of both at once), rates from machine_rates.py;
  host memory  the host memory the step reads and writes: adam_host_bytes (every host Adam pass, a
             rollback's redo included), grad_norm_host_bytes (the gradient norm's reads) and the
             copies' bytes, which DMA reads or writes in host memory once, over the host memory
             bandwidth from machine_rates.py.
A term whose rate was not measured is left out (null), and the bound is then that of the rest.

With several ranks on one host the steps are one rank's: its micro-batch on its own GPU and its
copies over its own link (the rates are one GPU's), while the host's memory bandwidth is shared,
so the host memory term counts the node's ranks_per_host ranks, each moving as many bytes.
"""

import statistics

TERMS = ("compute_s", "copy_s", "host_s")
LIMITS = {"compute_s": "compute", "copy_s": "copies", "host_s": "host memory"}


def over(amount, rate):
    return None if not rate else amount / rate


def step_terms(step, rates, flops_per_step, model_flops_rate, ranks_per_host=1):
    h2d = step.get("moved_h2d_bytes") or 0
    d2h = step.get("moved_d2h_bytes") or 0
    copies = [over(h2d, rates.get("h2d_bytes_per_s")), over(d2h, rates.get("d2h_bytes_per_s")),
              over(h2d + d2h, rates.get("two_way_bytes_per_s"))]
    copies = [c for c in copies if c is not None]
    adam = step.get("adam_host_bytes")
    host = None if adam is None else adam + (step.get("grad_norm_host_bytes") or 0) + h2d + d2h
    return {
        "compute_s": over(flops_per_step, model_flops_rate),
        "copy_s": max(copies) if copies else None,
        "host_s": None if host is None else over(host * ranks_per_host,
                                                 rates.get("host_memory_bytes_per_s")),
    }


def figures(timed_steps, rates, flops_per_step, model_flops_rate, rate_source, ranks_per_host=1):
    """The 'bound' object of a row: per timed step its terms, bound and step / bound, and the
    median ratio; None when there is nothing to hold the steps against."""
    if not timed_steps or (rates is None and not model_flops_rate):
        return None
    rates = rates or {}
    per_step = []
    for s in timed_steps:
        t = step_terms(s, rates, flops_per_step, model_flops_rate, ranks_per_host)
        known = {k: v for k, v in t.items() if v is not None}
        bound = max(known.values()) if known else None
        per_step.append(dict(
            step=s.get("step"), step_s=s["step_time_s"], **t, bound_s=bound,
            limit=LIMITS[max(known, key=known.get)] if known else None,
            ratio=s["step_time_s"] / bound if bound else None))
    ratios = [p["ratio"] for p in per_step if p["ratio"] is not None]
    return {
        "model_flops_rate": model_flops_rate, "model_flops_rate_source": rate_source,
        "h2d_bytes_per_s": rates.get("h2d_bytes_per_s"),
        "d2h_bytes_per_s": rates.get("d2h_bytes_per_s"),
        "two_way_bytes_per_s": rates.get("two_way_bytes_per_s"),
        "host_memory_bytes_per_s": rates.get("host_memory_bytes_per_s"),
        "flops_per_step": flops_per_step, "ranks_per_host": ranks_per_host,
        "steps": per_step,
        "ratio_median": statistics.median(ratios) if ratios else None,
    }


def lines(label, bound):
    """One line per timed step for people."""
    out = []
    for p in (bound or {}).get("steps", []):
        def f(v):
            return "n/a" if v is None else f"{v:.3f}"
        ratio = "n/a" if p["ratio"] is None else f"{p['ratio']:.2f}"
        out.append(f"{label} step {p['step']}: {p['step_s']:.3f} s = {ratio} x the bound "
                   f"{f(p['bound_s'])} s (compute {f(p['compute_s'])}, copies {f(p['copy_s'])}, "
                   f"host memory {f(p['host_s'])}; set by {p['limit']})")
    return out
