#!/usr/bin/env python3
"""Each decoder family's tiny folder written by transformers' own save_pretrained, its losses at
steps 1 and 2 from transformers' own classes and from pstar (issue 54, the GPU ledger's item 4):
the strongest check of tests/reference/decoder_reference.py's transcription of Hugging Face's
maths, which pstar's tests compare against everywhere else.

    bench/gpu/hf_family_parity.py --pstar BUILD/pstar --out DIR [--families llama,qwen3,...]
        [--device cpu|cuda] [--without-transformers]

For each family: decoder_reference.py's tiny config.json and random weights (every feature of the
family on), loaded into AutoModelForCausalLM.from_config (eager attention, float64) and written by
save_pretrained as float32 safetensors; the reference's token windows; transformers' losses at
steps 1 and 2 with torch's AdamW (lr 0.01, weight decay 0.01, one group) between; the reference
script's float64 losses on the same weights; and `pstar train` on the saved folder (fp32,
sequential windows, the same AdamW). One JSON line a family: the three pairs of losses and the
largest relative difference of pstar's and the reference's from transformers' ("hf_losses",
"reference_losses", "pstar_losses", "max_rel_diff"). Exit status 1 when
any difference exceeds 1e-5 (transformers keeps RMSNorm, RoPE and softmax in fp32 even in a
float64 model, so this is fp32 against fp32). --without-transformers writes the folders with the
reference script instead (to check this script where transformers is missing); its rows then say
"hf_losses": null.
"""

import argparse
import json
import math
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import decoder_reference as reference  # noqa: E402

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3"]
LR, WEIGHT_DECAY, BATCH, SEQ, STEPS = 0.01, 0.01, 4, 16, 2


def hf_losses(config, weights, tokens, out_dir, device):
    """Writes the folder with save_pretrained; transformers' losses of the two steps."""
    import transformers  # the GPU machine has it; nothing else here needs it

    kwargs = {k: v for k, v in config.items()
              if k not in ("architectures", "torch_dtype", "model_type")}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **kwargs)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager")
    model = model.to(dtype=torch.float64)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            if name not in params:
                raise SystemExit(f"{config['model_type']}: transformers' model has no {name}")
            params[name].copy_(value)
    missing = [n for n in params if n not in weights]
    if missing:
        raise SystemExit(f"{config['model_type']}: weights for {missing[:3]} not written")
    model.to(dtype=torch.float32).save_pretrained(out_dir, safe_serialization=True)
    model = model.to(dtype=torch.float64, device=device)
    model.train()
    return reference.train_losses(lambda ids: model(input_ids=ids.to(device)).logits.cpu(),
                                  model.parameters(), tokens, BATCH, SEQ, STEPS, LR, WEIGHT_DECAY)


def pstar_losses(pstar, folder, tokens_path, work, device):
    config = {
        "model": {"init_from": folder, "seq_len": SEQ},
        "data": {"path": tokens_path, "sampling": "sequential"},
        "train_micro_batch_size_per_gpu": BATCH,
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": WEIGHT_DECAY}},
        "bf16": {"enabled": False},
        "gradient_clipping": 0.0,
        "training": {"steps": STEPS, "lr_schedule": {"type": "constant"}},
    }
    path = os.path.join(work, "pstar.json")
    with open(path, "w") as f:
        json.dump(config, f)
    metrics = os.path.join(work, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    with open(os.path.join(work, "pstar.log"), "w") as log:
        subprocess.run([pstar, "train", path, "--device", device, "--metrics", metrics],
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    with open(metrics) as f:
        steps = [json.loads(line) for line in f if '"step"' in line]
    return [s["loss"] for s in steps]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pstar", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--device", default="cpu", help="where transformers and pstar compute")
    ap.add_argument("--without-transformers", action="store_true")
    a = ap.parse_args()
    worst = 0.0
    for family in a.families.split(","):
        work = os.path.abspath(os.path.join(a.out, family))
        folder = os.path.join(work, "hf")
        os.makedirs(folder, exist_ok=True)
        config, stored, weights, tokens = reference.make_case(family, "", 0,
                                                              STEPS * BATCH * SEQ + 1)
        tokens_path = os.path.join(work, "tokens.bin")
        with open(tokens_path, "wb") as f:
            f.write(tokens.numpy().astype("<u2").tobytes())
        if a.without_transformers:
            hf = None
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(dict(config, torch_dtype="float32"), f, indent=2)
            reference.TINY_LLAMA.write_safetensors(os.path.join(folder, "model.safetensors"),
                                                   list(stored.items()), "F32")
        else:
            hf = hf_losses(config, weights, tokens, folder, a.device)
        ref = reference.losses(config, weights, tokens, BATCH, SEQ, STEPS, LR, WEIGHT_DECAY)
        ours = pstar_losses(a.pstar, folder, tokens_path, work, a.device)
        base = hf if hf is not None else ref
        diff = max(max(abs(x - y) / abs(y) for x, y in zip(ours, base)),
                   max(abs(x - y) / abs(y) for x, y in zip(ref, base)))
        worst = max(worst, diff)
        # Keys of their own: ledger_summary.py reads "pstar" and "fsdp2" as benchmark sides.
        print(json.dumps({"bench": "family_parity", "model": family, "hf_losses": hf,
                          "reference_losses": ref, "pstar_losses": ours, "max_rel_diff": diff}),
              flush=True)
    return 0 if worst <= 1e-5 and math.isfinite(worst) else 1


if __name__ == "__main__":
    sys.exit(main())
