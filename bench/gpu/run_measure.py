"""Running one benchmark command with its memory peaks measured, for gpt_bench_util.py's
`measure` (gpt_bench.sh, llama_bench.sh). Standard library only.

A command may be several processes: `pstar train --nproc N` starts N ranks, torchrun N workers.
getrusage's ru_maxrss of the children is the peak of the *largest* one, not of their sum, so the
host peak is also sampled: the resident sets of every process in the command's session, added
up, several times a second. The figure reported is the larger of the two (Note [host peak of
several processes]).
"""

import os
import shutil
import signal
import subprocess
import threading
import time

# Note [host peak of several processes]: the sampled sum can miss a peak shorter than the
# interval, and ru_maxrss (the kernel's own high-water mark) misses every process but the
# largest; for one process ru_maxrss is exact, for N ranks that each hold about 1/N of the model
# data the sum is what the node must have. Pinned host memory is resident and counts in both.
SAMPLE_S = 0.1


def session_rss_bytes(sid, proc_root="/proc"):
    """The resident set, in bytes, of every process whose session is `sid`, added up."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "stat")) as f:
                stat = f.read()
        except OSError:  # the process ended between the listing and the read
            continue
        # Fields after the command name (in parentheses, which may itself hold spaces and
        # parentheses): state ppid pgrp session ... with rss the 22nd of them (proc(5)).
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 21 and int(fields[3]) == sid:
            total += int(fields[21]) * page
    return total


class _Sampler:
    """Calls `read` every SAMPLE_S seconds on a thread of its own and keeps the largest value."""

    def __init__(self, read):
        self.peak = None
        self._read, self._stop = read, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            value = self._read()
            if value is not None:
                self.peak = value if self.peak is None else max(self.peak, value)
            if self._stop.wait(SAMPLE_S):
                return

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        return self.peak


def visible_gpu_ids(gpus):
    """nvidia-smi's indices of the first `gpus` GPUs the command sees: CUDA_VISIBLE_DEVICES's
    when it lists indices, else 0..gpus-1."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if ids and all(i.isdigit() for i in ids):
        return ids[:gpus]
    return [str(i) for i in range(gpus)]


class GpuSampler:
    """Peak of nvidia-smi's memory.used over the command's GPUs (the largest one's), while a
    command runs: the whole device's use, so it counts pstar's arena and LibTorch's cache alike
    (null without nvidia-smi)."""

    def __init__(self, gpus=1):
        self.peak_mib = None
        self.proc = None
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return
        try:
            self.proc = subprocess.Popen(
                [exe, "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                 "-i", ",".join(visible_gpu_ids(gpus)), "-lms", "200"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                mib = int(line.strip())
            except ValueError:
                continue
            self.peak_mib = mib if self.peak_mib is None else max(self.peak_mib, mib)

    def stop(self):
        if self.proc is None:
            return None
        self.proc.terminate()
        self.proc.wait()
        self.thread.join(timeout=5)
        return None if self.peak_mib is None else self.peak_mib * 1024 * 1024


def measure(command, timeout=0, gpus=1):
    """Runs `command` (a list) to its end, or stops it after `timeout` seconds (0: no limit), and
    returns its exit code, wall time and memory peaks as measure's JSON object."""
    import resource
    gpu = GpuSampler(gpus)
    start = time.monotonic()
    timed_out = False
    # A session of its own, so that a timeout can stop the command and its children together,
    # and so that the host sampler finds all of them.
    proc = subprocess.Popen(command, start_new_session=True)
    host = _Sampler(lambda: session_rss_bytes(proc.pid))
    try:
        rc = proc.wait(timeout=timeout or None)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGTERM)  # pstar finishes its step and exits with 143
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    wall = time.monotonic() - start
    sampled = host.stop()
    gpu_peak = gpu.stop()
    # ru_maxrss of the children covers every reaped descendant (KiB on Linux).
    maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    rc = 128 - rc if rc < 0 else rc  # killed by a signal: the shell's convention
    return {"exit_code": rc, "timed_out": timed_out, "wall_s": wall,
            "host_peak_bytes": max(maxrss, sampled or 0), "host_largest_process_peak_bytes": maxrss,
            "host_sampled_peak_bytes": sampled, "gpu_used_peak_bytes": gpu_peak}
