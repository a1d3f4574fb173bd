#!/usr/bin/env python3
"""An independent reader of pstar's TensorBoard event files, for tests/cmd/tensorboard_test.cpp.

    tensorboard_reader.py DIR METRICS.jsonl... [--keys K1,K2]

It shares nothing with pstar's writer: the TFRecord framing and CRC-32C are implemented here, and
the messages (Event, Summary, SessionLog, the text plugin's metadata and tensor) are declared here
with their public field numbers and decoded by Debian's python3-protobuf. It checks

  * every record of every event file in DIR: both masked CRC-32Cs, and no partial record;
  * that each file's first record is the file version "brain.Event:2";
  * that every scalar equals, as a float32, the number under its key in the JSON Lines metrics at
    the same step (tag "group/KEY", the held-out loss "eval/loss"), that every number of the
    metrics (null excepted) has its scalar, and no scalar is left over; --keys limits this to
    those keys (`pstar eval`'s line);
  * that no step's scalars are in two files.

It prints a JSON summary on stdout for the test to check further: per file its path, the steps of
its scalars, its SessionLog START step (null if none) and its config text (parsed); and the tags.
Exit status 0 when all holds, 1 with the reasons on stderr, 77 without python3-protobuf.
"""
import argparse
import json
import math
import os
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool
except ImportError:
    print("tensorboard_reader: no google.protobuf (Debian: apt-get install python3-protobuf)",
          file=sys.stderr)
    sys.exit(77)

# CRC-32C, bit by bit from the reflected Castagnoli polynomial, then a table of it.
_POLY = 0x82F63B78
_TABLE = []
for _byte in range(256):
    _c = _byte
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C


def declare_messages():
    """The fields of tensorboard/compat/proto's Event and what it holds that pstar writes."""
    T = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="pstar_test/event.proto", package="pstar_test",
                                           syntax="proto2")

    def message(name, fields):
        m = f.message_type.add(name=name)
        for field_name, number, kind, type_name, repeated in fields:
            fd = m.field.add(name=field_name, number=number, type=kind,
                             label=T.LABEL_REPEATED if repeated else T.LABEL_OPTIONAL)
            if type_name:
                fd.type_name = ".pstar_test." + type_name

    message("Event", [("wall_time", 1, T.TYPE_DOUBLE, None, False),
                      ("step", 2, T.TYPE_INT64, None, False),
                      ("file_version", 3, T.TYPE_STRING, None, False),
                      ("summary", 5, T.TYPE_MESSAGE, "Summary", False),
                      ("session_log", 7, T.TYPE_MESSAGE, "SessionLog", False)])
    message("SessionLog", [("status", 1, T.TYPE_INT32, None, False)])
    message("Summary", [("value", 1, T.TYPE_MESSAGE, "Value", True)])
    message("Value", [("tag", 1, T.TYPE_STRING, None, False),
                      ("simple_value", 2, T.TYPE_FLOAT, None, False),
                      ("tensor", 8, T.TYPE_MESSAGE, "TensorProto", False),
                      ("metadata", 9, T.TYPE_MESSAGE, "SummaryMetadata", False)])
    message("SummaryMetadata", [("plugin_data", 1, T.TYPE_MESSAGE, "PluginData", False),
                                ("data_class", 4, T.TYPE_INT32, None, False)])
    message("PluginData", [("plugin_name", 1, T.TYPE_STRING, None, False),
                           ("content", 2, T.TYPE_BYTES, None, False)])
    message("TensorProto", [("dtype", 1, T.TYPE_INT32, None, False),
                            ("tensor_shape", 2, T.TYPE_MESSAGE, "TensorShapeProto", False),
                            ("string_val", 8, T.TYPE_BYTES, None, True)])
    message("TensorShapeProto", [("dim", 2, T.TYPE_MESSAGE, "Dim", True)])
    message("Dim", [("size", 1, T.TYPE_INT64, None, False)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("pstar_test.Event")
    try:
        from google.protobuf.message_factory import GetMessageClass  # protobuf >= 4.21
        return GetMessageClass(descriptor)
    except ImportError:
        from google.protobuf import message_factory
        return message_factory.MessageFactory(pool).GetPrototype(descriptor)


Event = declare_messages()
problems = []


def problem(text):
    problems.append(text)


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            problem(f"{path}: {len(data) - at} bytes after the last record, not a record")
            return
        head = data[at:at + 8]
        (length,) = struct.unpack("<Q", head)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if masked(head) != length_crc:
            problem(f"{path}: the length's CRC at offset {at} is wrong")
            return
        if len(data) - at - 12 < length + 4:
            problem(f"{path}: the record at offset {at} is cut short")
            return
        payload = data[at + 12:at + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked(payload) != payload_crc:
            problem(f"{path}: the payload's CRC of the record at offset {at} is wrong")
        yield payload
        at += 16 + length


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read_dir(directory):
    files = []
    scalars = {}  # (tag, step) -> value
    step_file = {}  # step -> the file whose scalars hold it
    names = sorted(n for n in os.listdir(directory) if n.startswith("events.out.tfevents."))
    for name in names:
        path = os.path.join(directory, name)
        info = {"path": path, "steps": [], "session_start": None, "config": None}
        for i, payload in enumerate(records(path)):
            event = Event()
            event.ParseFromString(payload)
            if i == 0:
                if event.file_version != "brain.Event:2" or event.HasField("summary"):
                    problem(f"{path}: the first record is not the file version: {event}")
                continue
            if event.HasField("file_version"):
                problem(f"{path}: record {i} is a second file version")
            if event.HasField("session_log"):
                if event.session_log.status != 1:
                    problem(f"{path}: SessionLog status {event.session_log.status}, not START")
                info["session_start"] = event.step
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    key = (value.tag, event.step)
                    if key in scalars:
                        problem(f"{path}: {value.tag} at step {event.step} twice")
                    scalars[key] = value.simple_value
                    if step_file.setdefault(event.step, path) != path:
                        problem(f"step {event.step} has scalars in {step_file[event.step]} and "
                                f"in {path}")
                    if event.step not in info["steps"]:
                        info["steps"].append(event.step)
                elif value.HasField("tensor"):
                    plugin = value.metadata.plugin_data.plugin_name
                    tensor = value.tensor
                    if plugin != "text" or tensor.dtype != 7 or len(tensor.string_val) != 1 or \
                            len(tensor.tensor_shape.dim) != 0:
                        problem(f"{path}: {value.tag} is not a text-plugin string: {value}")
                        continue
                    text = tensor.string_val[0].decode("utf-8")
                    if value.tag == "config":
                        # A markdown code block: each line indented by four spaces.
                        lines = [line[4:] if line.startswith("    ") else line
                                 for line in text.split("\n")]
                        try:
                            info["config"] = json.loads("\n".join(lines))
                        except ValueError as e:
                            problem(f"{path}: the config text is not JSON: {e}")
                        info["config_step"] = event.step
                else:
                    problem(f"{path}: {value.tag} holds neither a scalar nor a tensor")
        files.append(info)
    return files, scalars


def tag_key(tag):
    return "eval_loss" if tag == "eval/loss" else tag.split("/", 1)[-1]


def compare(scalars, metrics_paths, keys):
    lines = {}
    for path in metrics_paths:
        for text in open(path):
            if not text.strip():
                continue
            line = json.loads(text)
            if "record" in line:
                continue
            step = line["step"]
            if step in lines:
                problem(f"{path}: step {step} is in two metrics lines")
            lines[step] = line
    by_step = {}
    for (tag, step), value in scalars.items():
        by_step.setdefault(step, {})
        key = tag_key(tag)
        if key in by_step[step]:
            problem(f"step {step}: two tags for {key}")
        by_step[step][key] = (tag, value)
    compared = 0
    for step, line in sorted(lines.items()):
        got = by_step.get(step, {})
        for key, want in line.items():
            if key == "step" or isinstance(want, bool) or (keys and key not in keys):
                continue
            if want is None:
                if key in got:
                    problem(f"step {step}: {key} is null in the metrics but {got[key][0]} holds "
                            f"{got[key][1]}")
                continue
            if key not in got:
                problem(f"step {step}: no scalar for {key} ({want})")
                continue
            tag, value = got.pop(key)
            if not math.isfinite(want) or float32(want) != value:
                problem(f"step {step}: {tag} is {value!r}, the metrics' {key} {want!r} "
                        f"(float32 {float32(want)!r})")
            compared += 1
        for key, (tag, value) in got.items():
            problem(f"step {step}: {tag} = {value} has no number in the metrics")
    for step in sorted(set(by_step) - set(lines)):
        problem(f"step {step}: scalars but no metrics line")
    return compared


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("metrics", nargs="+")
    parser.add_argument("--keys", default="")
    args = parser.parse_args()
    files, scalars = read_dir(args.dir)
    if not files:
        problem(f"{args.dir}: no event file")
    keys = set(k for k in args.keys.split(",") if k)
    compared = compare(scalars, args.metrics, keys)
    if compared == 0:
        problem("no scalar was compared")
    for info in files:
        info["steps"].sort()
    summary = {"files": files, "tags": sorted(set(tag for tag, _ in scalars)),
               "compared": compared}
    print(json.dumps(summary))
    for text in problems:
        print("tensorboard_reader: " + text, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
