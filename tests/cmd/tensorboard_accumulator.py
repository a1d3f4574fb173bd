#!/usr/bin/env python3
"""TensorBoard's own reader on a pstar run's event files (issue 58), for scripts/gpu-verify.sh's
phase `tensorboard`, on a machine where the `tensorboard` package is installed:

    tensorboard_accumulator.py DIR METRICS.jsonl

EventAccumulator (what `tensorboard --logdir` reads runs with) loads DIR; the script prints the
tags it found by kind, then checks that the scalars include the training loss, rate, gradient
norm, throughput and TFLOPS, that `train/loss` has one point per step of METRICS.jsonl with the
same value (as float32), and that the config came through as the text plugin's tensor. Exit status
0 when it all holds, 1 otherwise, 77 without the tensorboard package.
"""
import json
import struct
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    print("tensorboard_accumulator: no tensorboard package (pip install tensorboard)",
          file=sys.stderr)
    sys.exit(77)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    directory, metrics_path = sys.argv[1], sys.argv[2]
    acc = event_accumulator.EventAccumulator(
        directory, size_guidance=event_accumulator.STORE_EVERYTHING_SIZE_GUIDANCE)
    acc.Reload()
    tags = acc.Tags()
    for kind in sorted(tags):
        if isinstance(tags[kind], list) and tags[kind]:
            print(f"{kind}: {', '.join(sorted(tags[kind]))}")
    problems = []
    for tag in ("train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/tflops"):
        if tag not in tags.get("scalars", []):
            problems.append(f"no scalar {tag}")
    losses = {}
    for line in open(metrics_path):
        record = json.loads(line)
        if "step" in record and record.get("loss") is not None:
            losses[record["step"]] = struct.unpack("<f", struct.pack("<f", record["loss"]))[0]
    points = {e.step: e.value for e in acc.Scalars("train/loss")} \
        if "train/loss" in tags.get("scalars", []) else {}
    if points != losses:
        problems.append(f"train/loss {points} is not the metrics' {losses}")
    if "config" not in tags.get("tensors", []):
        problems.append("no config text")
    else:
        text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode("utf-8")
        config = json.loads("\n".join(line[4:] for line in text.split("\n")))
        print(f"config: training.steps {config['training']['steps']}")
    print(f"train/loss: {len(points)} points, steps {min(points, default=None)}.."
          f"{max(points, default=None)}")
    for text in problems:
        print("tensorboard_accumulator: " + text, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
