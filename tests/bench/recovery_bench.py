#!/usr/bin/env python3
"""Recovery bench: what a kill -9 costs with the disk tier alone and with the
memory checkpoint tier (checkpoint.memory), for the tiny and the bench model
at W = 2 (CPU workers, the local launcher, a fixed seed). Each run trains to
step KILL (paced by the step gate, SHARDD_STEP_GATE), then rank 1 is killed
with SIGKILL; the job resumes and finishes. Per model and tier it prints:

  * seconds from the kill to the first step of the new attempt (rank 0's log);
  * steps lost (KILL minus the step resumed from) and seconds until the new
    attempt is back at step KILL;
  * the memory tier's cost: rank 0's stall per memory save (its own log line),
    per step (divided by memory.every_steps), the mean step time before the
    kill beside the disk-only run's, and the tier's host memory (the tmpfs
    folder's bytes, sampled at the kill).

Disk tier: checkpoint.every_steps DISK_EVERY. Memory tier: every_steps 200
(no disk step before the end) and memory.every_steps 5, keep_last 2. Prints
figures; never fails on speed. Not run in CI.

usage: SHARDD_BIN_DIR=build SHARDD_SOURCE_DIR=. recovery_bench.py
           [--models tiny,bench] [--kill-at 37] [--steps 60] [--disk-every 20] [--keep]
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos_soak import Cluster, SoakFailure, tail, wait_until  # noqa: E402


def write_job(tmp, name, model, steps, tier, disk_every):
    ckpt = (f"{{dir: ckpt, every_steps: {disk_every}, keep_last: 3, async: true}}" if tier == "disk" else
            "{dir: ckpt, every_steps: 200, keep_last: 3, async: true, memory: {every_steps: 5, keep_last: 2}}")
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(f"""name: {name}
model: {{preset: {model}}}
data: {{tokens: data/phrases.u32, seq_len: 32, shuffle: true}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 1}}
parallel: {{strategy: full_shard, world_size: 2, comm_timeout_s: 20}}
checkpoint: {ckpt}
resources: {{device: cpu}}
restart: {{max_restarts: 3, backoff_s: 0.2, heartbeat_timeout_s: 4, hang_timeout_s: 120}}
""")
    return path


def log_time(line):
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def rank0_log(c, job, attempt):
    paths = glob.glob(os.path.join(c.state, "jobs", job, f"attempt_{attempt}", "rank_0.log"))
    return open(paths[0], errors="replace").read().splitlines() if paths else []


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def run_one(c, a, model, tier):
    name = f"rb-{model}-{tier}"
    c.open_gate(a.kill_at)
    job = c.ctl("submit", write_job(c.tmp, name, model, a.steps, tier, a.disk_every)).strip()
    status = lambda: c.status(job)
    wait_until(600, lambda: int(status().get("progress", {}).get("step", 0)) >= a.kill_at, f"{name} at step {a.kill_at}")
    last_ckpt = (a.kill_at // a.disk_every) * a.disk_every if tier == "disk" else (a.kill_at // 5) * 5
    wait_until(120, lambda: int(status().get("progress", {}).get("last_committed_step", -1)) >= last_ckpt,
               f"{name}: step {last_ckpt} committed")
    tmpfs = 0
    if tier == "memory":
        listing = json.loads(c.ctl("checkpoints", job, "--json"))["checkpoints"]
        mem = [x["path"] for x in listing if x.get("tier") == "memory"]
        tmpfs = dir_bytes(os.path.dirname(mem[0])) if mem else 0
    rows = [json.loads(r) for r in c.ctl("metrics", job, "--json").splitlines()]
    step_s = [r["seconds"] for r in rows if 2 <= r["step"] <= a.kill_at]
    pid = [int(w["pid"]) for w in status().get("workers", []) if int(w.get("rank", 0)) == 1][0]
    t_kill = time.time()
    os.kill(pid, signal.SIGKILL)
    wait_until(120, lambda: int(status().get("attempt", 0)) >= 2, f"{name}: a second attempt")
    c.open_gate(1 << 40)
    c.ctl("watch", job, check=False)
    if status().get("state") != "SUCCEEDED":
        raise SoakFailure(f"{name} did not succeed: " + c.ctl("status", job, check=False))
    log = rank0_log(c, job, 2)
    resumed = next((int(m.group(1)) for m in (re.search(r"resumed from \S+ \(step (\d+),", x) for x in log) if m), 0)
    steps = [(int(m.group(1)), log_time(x)) for m, x in ((re.search(r"\] step (\d+)/", x), x) for x in log) if m]
    if not steps:
        steps = [(int(m.group(1)), log_time(x)) for m, x in ((re.search(r"step (\d+)/\d+ loss", x), x) for x in log) if m]
    first = steps[0][1] - t_kill if steps else float("nan")
    back = next((t - t_kill for s, t in steps if s >= a.kill_at), float("nan"))
    stall = next((float(m.group(2)) for m in (re.search(r"memory tier: (\d+) saves in \S+, ([0-9.]+) ms stalled", x)
                                                for x in log) if m), 0.0)
    return {"model": model, "tier": tier, "resumed": resumed, "lost": a.kill_at - resumed, "first_s": first,
            "back_s": back, "step_ms": 1000 * sum(step_s) / max(1, len(step_s)), "stall_ms": stall, "tmpfs": tmpfs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny,bench")
    ap.add_argument("--kill-at", type=int, default=37)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--disk-every", type=int, default=20)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    src = os.environ.get("SHARDD_SOURCE_DIR") or sys.exit("SHARDD_SOURCE_DIR must point at the source dir")
    bin_dir = os.environ.get("SHARDD_BIN_DIR") or sys.exit("SHARDD_BIN_DIR must point at the build dir")
    c = Cluster(os.path.abspath(bin_dir), tempfile.mkdtemp(prefix="shardd-recovery."))
    try:
        os.makedirs(os.path.join(c.tmp, "data"))
        subprocess.run([sys.executable, os.path.join(src, "configs", "data", "make_tokens.py"),
                        os.path.join(c.tmp, "data", "phrases.u32")], check=True, capture_output=True)
        c.start()
        out = [run_one(c, a, m, t) for m in a.models.split(",") for t in ("disk", "memory")]
        print(f"recovery bench: W=2 CPU workers, kill -9 of rank 1 after step {a.kill_at}; disk tier every "
              f"{a.disk_every} steps; memory tier every 5 steps (keep_last 2), disk every 200")
        print(f"{'model':6} {'tier':6} {'resumed':>7} {'lost':>4} {'kill→1st step s':>15} {'back at kill s':>14} "
              f"{'step ms':>8} {'stall ms/save':>13} {'stall ms/step':>13} {'tmpfs MB':>9}")
        for r in out:
            mem = r["tier"] == "memory"
            print(f"{r['model']:6} {r['tier']:6} {r['resumed']:>7} {r['lost']:>4} {r['first_s']:>15.2f} "
                  f"{r['back_s']:>14.2f} {r['step_ms']:>8.1f} {(r['stall_ms'] if mem else 0):>13.2f} "
                  f"{(r['stall_ms'] / 5 if mem else 0):>13.2f} {r['tmpfs'] / 1e6:>9.2f}")
        return 0
    except SoakFailure as e:
        print(f"FAIL: {e}\n--- shardd.log (tail)\n{tail(c.log)}", file=sys.stderr)
        a.keep = True
        return 1
    finally:
        if c.proc and c.proc.poll() is None:
            c.kill()
        for p in c.our_workers():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if a.keep:
            print(f"kept {c.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(c.tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
