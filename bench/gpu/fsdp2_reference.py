#!/usr/bin/env python3
"""The PyTorch reference for pstar's GPU model benchmarks (bench/README.md).

Trains pstar's GPT (GPT-2 layout: token and position embeddings, pre-LN blocks with a fused qkv
projection, a 4h GELU MLP, a final LayerNorm and an LM head tied to the token embedding) on
synthetic tokens in bf16, and prints one JSON line with its throughput and memory peaks.

  --mode fsdp2-offload  FSDP2 (fully_shard) on one GPU with CPUOffloadPolicy(pin_memory=True) and
                        MixedPrecisionPolicy(bf16 params, fp32 reductions): fp32 parameters,
                        gradients and AdamW state live in pinned host memory, as pstar's do.
  --mode plain          The whole model on the GPU: fp32 parameters under bf16 autocast.

--model llama --hf-config CONFIG.json trains a Llama-family decoder of that Hugging Face shape
instead (LlamaForCausalLM's parameter names and maths: RMSNorm in fp32, rotary embeddings with
llama3 scaling, grouped-query attention, SwiGLU, an untied head unless tie_word_embeddings), as
pstar's Llama does; initialised N(0, initializer_range), norms at 1.

Under torchrun (--nproc_per_node N, gpt_bench.sh --nproc N) --mode fsdp2-offload shards the model
over the N ranks, each on the GPU of its LOCAL_RANK with a micro-batch of its own; rank 0 prints
the line, with tokens/s of the global batch, TFLOPS per GPU and the host peak of all ranks added.

--model hf --hf-config CONFIG.json trains Hugging Face's own class for that config.json instead
(transformers' AutoModelForCausalLM: Qwen3, Gemma 3, Phi-4, Mixtral, Qwen3-MoE, ...; hf_reference.py),
its parameters and FLOPs per token counted by hf_shape.py as pstar counts them. Needs transformers.

--dry-run builds the model on the meta device only (any PyTorch >= 1.13, no GPU) and prints the
parameter count and FLOPs per token with null timings. Needs only the standard library and torch.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

HEAD_SIZE = 128


def launched_ranks():
    """(rank, local rank, world size) that torchrun (or another env:// launcher) set; one rank
    without one."""
    env = os.environ
    return (int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0")),
            int(env.get("WORLD_SIZE", "1")))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["fsdp2-offload", "plain"], default="fsdp2-offload")
    p.add_argument("--model", choices=["gpt", "llama", "hf"], default="gpt",
                   help="gpt: pstar's GPT of --hidden/--layers/--vocab; llama: the shape of "
                        "--hf-config; hf: transformers' own class for --hf-config")
    p.add_argument("--hf-config", metavar="CONFIG.json",
                   help="--model llama: a Hugging Face config.json (model_type llama, mistral or "
                        "qwen2 without sliding window); it sets hidden, layers, heads and vocab")
    p.add_argument("--experts-implementation", metavar="NAME",
                   help="--model hf, a mixture of experts: transformers' expert kernel (e.g. "
                        "eager or grouped_mm; default: transformers' own choice, which the record "
                        "names)")
    p.add_argument("--optimizer", choices=["fused", "foreach"], default="fused",
                   help="torch.optim.AdamW implementation (default fused)")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--heads", type=int, default=None, help="default hidden / 128")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    p.add_argument("--attention", choices=["auto", "sdpa", "math"], default="auto",
                   help="sdpa: F.scaled_dot_product_attention (flash on H100); math: explicit fp32 "
                        "softmax as pstar's GPT computes it; auto: sdpa where PyTorch has it")
    p.add_argument("--no-checkpointing", dest="checkpointing", action="store_false",
                   help="keep every block's activations (default: recompute them per block)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: only to check this script on a machine without a GPU (--mode plain)")
    p.add_argument("--clip", type=float, default=0.0,
                   help="clip the global gradient norm to this (default 0: off), as pstar's "
                        "gradient_clipping")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--trace", metavar="PATH",
                   help="after the timed steps, run one more under torch.profiler and write its "
                        "Chrome trace here (bench/gpu/trace_summary.py reads it)")
    p.add_argument("--dry-run", action="store_true",
                   help="build on the meta device, print the parameter count, train nothing")
    a = p.parse_args(argv)
    a.hf = None
    if a.model in ("llama", "hf"):
        if not a.hf_config:
            p.error(f"--model {a.model} needs --hf-config CONFIG.json")
        if a.model == "hf":
            try:
                import transformers  # noqa: F401
            except ImportError as e:
                p.error(f"--model hf needs transformers, which this Python ({sys.executable}) "
                        f"lacks: {e}")
            import hf_shape
            read = hf_shape.load
        else:
            import llama_reference
            read = llama_reference.read_config
        try:
            a.hf = read(a.hf_config)
        except (OSError, ValueError, KeyError) as e:
            p.error(f"--hf-config {a.hf_config}: {e}")
        a.hidden, a.layers = a.hf["hidden_size"], a.hf["num_hidden_layers"]
        a.heads, a.vocab = a.hf["num_attention_heads"], a.hf["vocab_size"]
    elif a.hf_config:
        p.error("--hf-config goes with --model llama or hf")
    if a.heads is None:
        a.heads = max(1, a.hidden // HEAD_SIZE)
    if a.model == "gpt" and a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    a.rank, a.local_rank, a.world = launched_ranks()
    if a.world > 1 and a.mode != "fsdp2-offload" and not a.dry_run:
        p.error(f"--mode {a.mode} runs on one GPU; {a.world} ranks were launched (WORLD_SIZE), "
                "which only --mode fsdp2-offload shards over")
    if a.device == "cpu" and a.mode != "plain" and not a.dry_run:
        p.error("--device cpu works only with --mode plain (FSDP2 offload needs a GPU)")
    if min(a.steps, a.seq, a.micro_batch, a.vocab, a.layers) < 1 or a.warmup < 0:
        p.error("--steps, --seq, --micro-batch, --vocab and --layers must be >= 1, --warmup >= 0")
    if a.attention == "auto":
        a.attention = "sdpa" if hasattr(F, "scaled_dot_product_attention") else "math"
    return a


def expected_params(hidden, layers, vocab, seq):
    """pstar's count (GptConfig::num_params): tied LM head, biases and LayerNorms included."""
    h = hidden
    return layers * (12 * h * h + 13 * h) + vocab * h + seq * h + 2 * h


def flops_per_token(params, layers, hidden, seq):
    """The issue's model FLOPs: 6N for the matmuls forward and backward, 12·L·h·s for attention.
    Activation recomputation is not counted, so TFLOPS compare equal work across implementations."""
    return 6 * params + 12 * layers * hidden * seq


class Block(nn.Module):
    def __init__(self, hidden, heads, attention, checkpointing, device):
        super().__init__()
        self.heads, self.attention, self.checkpointing = heads, attention, checkpointing
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5, device=device)
        self.c_attn = nn.Linear(hidden, 3 * hidden, device=device)
        self.c_proj = nn.Linear(hidden, hidden, device=device)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5, device=device)
        self.c_fc = nn.Linear(hidden, 4 * hidden, device=device)
        self.mlp_proj = nn.Linear(4 * hidden, hidden, device=device)

    def _attend(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)).float() * (1.0 / math.sqrt(h // self.heads))
            future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(future, float("-inf")).softmax(-1).to(v.dtype) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, s, h))

    def _forward(self, x):
        x = x + self._attend(x)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    def forward(self, x):
        # Under FSDP2 the block's hooks sit outside the checkpointed region: the recompute in
        # backward runs after FSDP's pre-backward unshard, on the gathered parameters.
        if self.checkpointing and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class Gpt(nn.Module):
    def __init__(self, a, device):
        super().__init__()
        self.n_layers = a.layers
        self.wte = nn.Embedding(a.vocab, a.hidden, device=device)
        self.wpe = nn.Embedding(a.seq, a.hidden, device=device)
        self.h = nn.ModuleList(Block(a.hidden, a.heads, a.attention, a.checkpointing, device)
                               for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.hidden, eps=1e-5, device=device)

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied LM head

    # The interface build_fsdp2/build_plain use (llama_reference.Llama has it too): the repeated
    # blocks, the modules outside them, and the initialisation of each.
    def blocks(self):
        return self.h

    def root_modules(self):
        return [self.wte, self.wpe, self.ln_f]

    @torch.no_grad()
    def init_block(self, block):
        # GPT-2's init, as pstar's: N(0, 0.02), residual projections scaled by 1/sqrt(2L).
        for lin in (block.c_attn, block.c_fc):
            lin.weight.normal_(0.0, 0.02)
        for lin in (block.c_proj, block.mlp_proj):
            lin.weight.normal_(0.0, 0.02 / math.sqrt(2.0 * self.n_layers))
        for lin in (block.c_attn, block.c_proj, block.c_fc, block.mlp_proj):
            lin.bias.zero_()
        for ln in (block.ln_1, block.ln_2):
            ln.weight.fill_(1.0)
            ln.bias.zero_()

    @torch.no_grad()
    def init_root(self):
        self.wte.weight.normal_(0.0, 0.02)
        self.wpe.weight.normal_(0.0, 0.02)
        self.ln_f.weight.fill_(1.0)
        self.ln_f.bias.zero_()


def make_model(a, device):
    if a.model == "hf":
        import hf_reference
        return hf_reference.HfDecoder(a.hf, a.attention, a.checkpointing, device,
                                      a.experts_implementation)
    if a.model == "llama":
        import llama_reference
        return llama_reference.Llama(a.hf, a.attention, a.checkpointing, device)
    return Gpt(a, device)


def model_flops_per_token(a, params):
    if a.model == "hf":
        import hf_shape
        return hf_shape.flops_per_token(a.hf, a.seq)
    if a.model == "llama":
        import llama_reference
        return llama_reference.flops_per_token(a.hf, params, a.seq)
    return flops_per_token(params, a.layers, a.hidden, a.seq)


def count_params(model):
    # parameters() yields each tensor once, so the tied LM head is not counted twice.
    return sum(p.numel() for p in model.parameters())


def impl_name(a):
    return f"{a.mode}-{a.optimizer}"


def peak_host_bytes():
    """VmHWM: the process's peak resident set (pinned host memory included)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def base_record(a, params):
    return {
        "bench": "gpt", "model": a.model, "impl": impl_name(a), "mode": a.mode, "optimizer": a.optimizer,
        "attention": a.attention, "activation_checkpointing": a.checkpointing,
        "params": params, "hidden": a.hidden, "layers": a.layers, "heads": a.heads,
        "seq": a.seq, "micro_batch": a.micro_batch, "vocab": a.vocab,
        "steps": a.steps, "warmup": a.warmup, "clip": a.clip, "world_size": a.world,
        "flops_per_token": model_flops_per_token(a, params),
        "tokens_per_s": None, "tflops": None, "s_per_step": None, "s_per_step_median": None,
        "s_per_step_min": None, "s_per_step_max": None, "host_peak_bytes": None, "host_bytes_per_param": None,
        "gpu_peak_bytes": None, "gpu_reserved_peak_bytes": None,
        "loss_first": None, "loss_last": None,
        "torch_version": torch.__version__, "device_name": None, "dry_run": a.dry_run,
        "error": None,
    }


def emit(record):
    print(json.dumps(record), flush=True)


def build_fsdp2(a, device):
    # Imported here so that --dry-run and --mode plain work on PyTorch without FSDP2 (< 2.6).
    import torch.distributed as dist
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    except ImportError as e:
        sys.exit(f"fsdp2_reference: --mode fsdp2-offload needs PyTorch >= 2.6 "
                 f"(torch.distributed.fsdp.fully_shard); this is {torch.__version__}: {e}")
    store_dir = None
    if a.world > 1:  # torchrun's rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)
        dist.init_process_group("nccl", init_method="env://")
    else:  # one process, one rank: a file store needs no free port
        store_dir = tempfile.mkdtemp(prefix="fsdp2-ref-")
        dist.init_process_group("nccl", init_method=f"file://{store_dir}/store", rank=0,
                                world_size=1)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    offload = CPUOffloadPolicy(pin_memory=True)
    model = make_model(a, device="meta")
    # Materialize and shard one block at a time: fully_shard moves each shard to pinned host
    # memory, so the GPU never holds more than one block in fp32 during set-up. Every rank draws
    # the same values (the same seed) and keeps its shard of them.
    for block in model.blocks():
        block.to_empty(device=device)
        model.init_block(block)
        fully_shard(block, mp_policy=mp, offload_policy=offload)
    for m in model.root_modules():
        m.to_empty(device=device)
    model.init_root()
    fully_shard(model, mp_policy=mp, offload_policy=offload)
    return model, (lambda: (dist.destroy_process_group(),
                            store_dir and shutil.rmtree(store_dir, True)))


def build_plain(a, device):
    model = make_model(a, device="meta").to_empty(device=device)
    for block in model.blocks():
        model.init_block(block)
    model.init_root()
    return model, (lambda: None)


def train(a, record):
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            sys.exit("fsdp2_reference: no CUDA device (use --dry-run on a machine without one)")
        if a.local_rank >= torch.cuda.device_count():
            sys.exit(f"fsdp2_reference: local rank {a.local_rank} needs GPU {a.local_rank}, and "
                     f"{torch.cuda.device_count()} are visible; launch at most that many ranks "
                     "per node")
        torch.cuda.set_device(a.local_rank)
        record["device_name"] = torch.cuda.get_device_name(a.local_rank)
    device = torch.device("cuda", a.local_rank) if cuda else torch.device("cpu")
    torch.manual_seed(a.seed)
    model, finish = (build_fsdp2 if a.mode == "fsdp2-offload" else build_plain)(a, device)
    record["params"] = count_params(model)
    if a.model == "hf":
        record["experts_implementation"] = model.experts_implementation
    record["flops_per_token"] = model_flops_per_token(a, record["params"])
    # One group, weight decay on every parameter, as pstar's AdamW.
    kind = {"fused": True} if a.optimizer == "fused" else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, **kind)
    # Plain mode: fp32 weights under bf16 autocast. FSDP2 casts its gathered parameters itself.
    autocast = a.mode == "plain"
    gen = torch.Generator(device=device)
    gen.manual_seed(a.seed + a.rank)  # each rank its own sequences
    times, losses = [], []
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def one_step():
        ids = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), device=device, generator=gen)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(ids[:, :-1])
        # The loss from fp32 logits, as pstar computes it.
        loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if a.world > 1:  # the global batch's loss, as pstar logs it
            import torch.distributed as dist
            loss = loss.detach().clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        return loss.item()  # synchronizes too

    for step in range(a.warmup + a.steps):
        if cuda and step == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        sync()
        start = time.perf_counter()
        losses.append(one_step())
        sync()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    if a.trace:
        # One more step, untimed: the profiler's own cost stays out of the figures above.
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            one_step()
            sync()
        prof.export_chrome_trace(a.trace)
    tokens_per_step = a.micro_batch * a.seq * a.world
    mean = sum(times) / len(times)
    record.update({
        "s_per_step": mean, "s_per_step_median": statistics.median(times),
        "s_per_step_min": min(times), "s_per_step_max": max(times), "tokens_per_s": tokens_per_step / mean,
        "loss_first": losses[0], "loss_last": losses[-1],
    })
    record["tflops"] = record["flops_per_token"] * record["tokens_per_s"] / a.world / 1e12  # per GPU
    if cuda:
        # Peaks over the timed steps (set-up and the warm-up's lazy init are left out).
        record["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
        record["gpu_reserved_peak_bytes"] = torch.cuda.max_memory_reserved()
    if a.world > 1:  # the node's host memory: every rank's peak, added up
        import torch.distributed as dist
        peaks = [None] * a.world
        dist.all_gather_object(peaks, peak_host_bytes())
        record["host_peak_bytes"] = sum(p or 0 for p in peaks)
    finish()


def main(argv):
    a = parse_args(argv)
    model = make_model(a, device="meta")
    params = count_params(model)
    if a.model == "hf":
        import hf_shape
        want, whose = hf_shape.params(a.hf), "its config.json implies (hf_shape.py)"
    elif a.model == "llama":
        import llama_reference
        want, whose = llama_reference.expected_params(a.hf), "its config.json implies"
    else:
        want, whose = expected_params(a.hidden, a.layers, a.vocab, a.seq), "pstar's GPT has"
    if params != want:
        sys.exit(f"fsdp2_reference: the model has {params} parameters, {whose} {want}; the "
                 "layouts differ")
    del model
    record = base_record(a, params)
    if a.dry_run:
        emit(record)
        return 0
    code = 0
    try:
        train(a, record)
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
        if "out of memory" not in str(e):
            raise
        record["error"] = "out of memory: " + str(e).split("\n")[0]
        code = 5
    if record["host_peak_bytes"] is None:
        record["host_peak_bytes"] = peak_host_bytes()
    if record["host_peak_bytes"]:
        record["host_bytes_per_param"] = record["host_peak_bytes"] / record["params"]
    if a.rank == 0:
        emit(record)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
