#!/usr/bin/env python3
"""Chaos soak: one job on the local launcher (CPU workers, the tiny preset, a
fixed seed) while random workers and the coordinator are killed with SIGKILL,
and a worker is sometimes frozen with SIGSTOP, at random moments: N
disruptions in all. A killed coordinator is started again on its port (the
workers keep training and are adopted). At the end the soak checks that

  * the job SUCCEEDED and its exported weights are byte-identical to an
    uninterrupted run of the same job (the reference, run first);
  * every resume named a step committed before it, both the coordinator's
    "resumed" events (its log, appended across restarts) and every rank's own
    "resumed from" line: no partial checkpoint was ever loaded;
  * every loss the coordinator kept equals the reference's at that step;
  * every step committed on disk has its checkpoint_committed event (a
    coordinator killed between writing COMMITTED and recording it records
    it when it starts again);
  * no worker the soak saw (a frozen one included) outlives the job;

and prints its figures. The full soak (docs/chaos.md) is --kills 100; CI runs
--kills 10 --memory-every 3 (ctest -R e2e_chaos_soak). --memory-every M adds
the memory checkpoint tier (checkpoint.memory.every_steps M, in /dev/shm):
every check above covers both tiers, the job's tmpfs folder must be gone once
it has ended, and the worker SIGKILLs alternate between the tiers: each is
paced by the step gate to land after a step committed in its tier and before
the next commit (of either tier), and the next attempt must resume from that
very step and tier ("resumed from step 33 (memory)").

usage: SHARDD_BIN_DIR=build SHARDD_SOURCE_DIR=. chaos_soak.py
           [--kills N] [--steps S] [--seed X] [--world W] [--every E] [--memory-every M] [--keep]
"""
import argparse
import filecmp
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime


class SoakFailure(Exception):
    pass


class Cluster:
    """One shardd (restartable on its port), shardctl, and the PIDs seen."""

    def __init__(self, bin_dir, tmp):
        self.bin_dir, self.tmp = bin_dir, tmp
        self.state = os.path.join(tmp, "state")
        self.log = os.path.join(tmp, "shardd.log")
        self.proc, self.addr, self.port = None, "", 0
        self.gate = os.path.join(tmp, "step_gate")
        self.gate_at = 0
        self.open_gate(1 << 40)
        self.env = dict(os.environ, SHARDD_WORKER_BIN=os.path.join(bin_dir, "worker", "shardd-worker"),
                        SHARDD_NUM_THREADS="1", SHARDD_STEP_GATE=self.gate)

    def open_gate(self, step):
        """Lets the workers start steps up to `step` (atomically replaced)."""
        self.gate_at = step
        with open(self.gate + ".tmp", "w") as f:
            f.write(f"{step}\n")
        os.replace(self.gate + ".tmp", self.gate)

    def start(self):
        offset = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        out = open(self.log, "a")
        self.proc = subprocess.Popen(
            [os.path.join(self.bin_dir, "coordinator", "shardd"), "--state-dir", self.state,
             "--listen", f"127.0.0.1:{self.port}", "--http-listen", "127.0.0.1:0", "--kill-grace-s", "2"],
            stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        out.close()
        for _ in range(300):
            with open(self.log, errors="replace") as f:
                f.seek(offset)
                m = re.findall(r"serving on ([0-9.]+:[0-9]+)", f.read())
            if m and not m[-1].endswith(":0"):
                self.addr = m[-1]
                self.port = int(self.addr.rsplit(":", 1)[1])
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise SoakFailure("shardd did not start: " + tail(self.log))

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def ctl(self, *args, check=True):
        r = subprocess.run([os.path.join(self.bin_dir, "coordinator", "ctl", "shardctl"), "--coordinator", self.addr,
                            "--state-dir", self.state, *args], cwd=self.tmp, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SoakFailure(f"shardctl {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
        return r.stdout

    def status(self, job):
        try:
            return json.loads(self.ctl("status", job, "--json"))
        except (SoakFailure, ValueError):
            return {}

    def ours(self, pid):
        """True while PID is a worker of this coordinator (not a reused PID)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f"--coordinator {self.addr} --job ".encode() in f.read().replace(b"\0", b" ")
        except OSError:
            return False

    def our_workers(self):
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and self.ours(int(p))]


class CommitWatcher(threading.Thread):
    """Polls the job's checkpoint dir and records when each step's COMMITTED
    first appeared and whether its manifest names one file per shard: the
    evidence, independent of the coordinator's events (a coordinator killed
    between writing COMMITTED and recording the event leaves no event), that a
    resumed step had been committed."""

    def __init__(self, patterns):
        super().__init__(daemon=True)
        self.patterns, self.seen, self.bad, self.stop = patterns, {}, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            for d in [d for p in self.patterns for d in glob.glob(p)]:
                step = int(os.path.basename(d)[5:])
                if step in self.seen:
                    continue
                try:
                    with open(os.path.join(d, "COMMITTED")) as f:
                        m = json.load(f)
                except (OSError, ValueError):
                    continue
                self.seen[step] = datetime.now()
                names = [x.get("name") for x in m.get("files", [])]
                if len(names) != len(set(names)) or len(names) != int(m.get("shard_count", len(names))):
                    self.bad.append(f"step {step}: COMMITTED lists {names}")
            time.sleep(0.05)


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def write_job(tmp, name, steps, world, every, memory_every=0, memory_root=""):
    path = os.path.join(tmp, f"{name}.yaml")
    memory = f", memory: {{every_steps: {memory_every}, keep_last: 2, dir: {memory_root}}}" if memory_every else ""
    with open(path, "w") as f:
        f.write(f"""name: {name}
model: {{preset: tiny}}
data: {{tokens: data/phrases.u32, seq_len: 32, shuffle: true}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 10}}
parallel: {{strategy: full_shard, world_size: {world}, comm_timeout_s: 10}}
checkpoint: {{dir: ckpt, every_steps: {every}, keep_last: 3, async: true{memory}}}
resources: {{device: cpu}}
restart: {{max_restarts: 1000, backoff_s: 0.1, heartbeat_timeout_s: 3, hang_timeout_s: 60}}
export: {{hf_dir: out/{name}, dtype: fp32}}
""")
    return path


def step_of(js):
    return int(js.get("progress", {}).get("step", 0))


def wait_until(limit_s, pred, what):
    end = time.time() + limit_s
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise SoakFailure(f"timed out after {limit_s} s waiting for {what}")


def commit_tier(a, s):
    """The tier step s is committed in: "disk", "memory", "both" or None."""
    memory = bool(a.memory_every) and s % a.memory_every == 0
    if s % a.every == 0:
        return "both" if memory else "disk"
    return "memory" if memory else None


def tier_kill_window(a, lo, tier):
    """The first step >= lo committed in `tier` alone (not a step of both),
    and the last step before the next commit of either tier: a kill while the
    gate holds the job in between resumes from exactly that step and tier."""
    s = lo
    while commit_tier(a, s) != tier:
        s += 1
    end = s + 1
    while commit_tier(a, end) is None:
        end += 1
    return s, end - 1


def disrupt(c, job, rng, counts, seen, stopped, a, kills, expected):
    """One random disruption of a RUNNING job; returns once it is recovering.
    With the memory tier, a worker SIGKILL aimed at a tier (alternately memory
    and disk) appends (step, tier, when) to `expected`: the resume it must cause."""
    js = wait_until(180, lambda: (lambda j: j if j.get("state") in ("RUNNING", "SUCCEEDED", "FAILED") else None)(
        c.status(job)), f"job {job} to run again after {kills} disruptions")
    if js["state"] != "RUNNING":
        raise SoakFailure(f"job ended ({js['state']}: {js.get('reason', '')}) after only {kills} of {a.kills} "
                          "disruptions (raise --steps)")
    attempt, base = int(js.get("attempt", 0)), step_of(js)
    # The job moves forward only as far as the step gate lets it (the
    # workers' SHARDD_STEP_GATE): to a random target step T, never more steps
    # than leaves room for the remaining disruptions, plus up to 5 more, so
    # the disruption lands while the ranks train (or, now and then, while they
    # wait at the gate). Paced by the job's progress, not the machine's speed:
    # a fast machine cannot finish the job before the schedule does.
    cap = max(1, (a.steps - base - 4 * a.every - 20) // (a.kills - kills))
    kind = rng.random()
    if a.memory_every and kills == a.kills - 1 and not any(t == "memory" for _, t, _ in expected):
        kind = 0.5  # the last disruption: a worker SIGKILL after a memory step, if none landed yet
    aimed = None
    if a.memory_every and 0.25 <= kind < 0.85:
        # Past the gate the previous disruption opened too: the resumed job
        # may still be training up to it.
        memory_done = any(t == "memory" for _, t, _ in expected)
        aimed = "disk" if memory_done and counts["worker SIGKILL"] % 2 else "memory"
        target, last = tier_kill_window(a, max(base, c.gate_at) + rng.randint(1, cap), aimed)
        c.open_gate(rng.randint(target, last))
    else:
        target = base + rng.randint(1, cap)
        c.open_gate(target + rng.randint(0, 5))
    js = wait_until(180, lambda: (lambda j: j if step_of(j) >= target or j.get("state") != "RUNNING" else None)(
        c.status(job)), f"job {job} to reach step {target}")
    if aimed:  # its commit may still be on its way (async saves)
        wait_until(60, lambda: (lambda j: int(j.get("progress", {}).get("last_committed_step", -1)) >= target or
                                j.get("state") != "RUNNING")(c.status(job)), f"job {job} to commit step {target}")
    time.sleep(rng.uniform(0, 0.2))
    js = c.status(job) or js
    step = step_of(js)
    now = datetime.now().strftime("%H:%M:%S.%f")[:-3]
    if kind < 0.25:
        pause = rng.uniform(0, 1.5)
        print(f"{now} [{kills}] step ~{step} attempt {attempt}: SIGKILL coordinator (pid {c.proc.pid}), "
              f"restart after {pause:.2f} s", flush=True)
        c.kill()
        time.sleep(pause)
        c.start()
        counts["coordinator SIGKILL"] += 1
        return
    pids = [int(w.get("pid", 0)) for w in js.get("workers", []) if int(w.get("pid", 0)) > 0 and c.ours(int(w["pid"]))]
    if not pids:
        return False
    seen.update(pids)
    pid = rng.choice(pids)
    stop = kind >= 0.85
    print(f"{now} [{kills}] step ~{step} attempt {attempt}: {'SIGSTOP' if stop else 'SIGKILL'} worker pid {pid}" +
          (f" (after {aimed} step {target})" if aimed else ""), flush=True)
    if aimed:
        expected.append((target, aimed, time.time()))
    os.kill(pid, signal.SIGSTOP if stop else signal.SIGKILL)
    (stopped.append(pid) if stop else None)
    counts["worker SIGSTOP" if stop else "worker SIGKILL"] += 1
    wait_until(60, lambda: (lambda j: int(j.get("attempt", 0)) > attempt or j.get("state") == "SUCCEEDED")(c.status(job)),
               f"a new attempt after the disruption (attempt {attempt})")


def check_resumes(log, jobs_dir, job, watched):
    """Every resume (coordinator event, rank log line) named a step committed
    before it: by a checkpoint_committed event or a COMMITTED file seen on disk."""
    def ts(line):
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")
    committed, problems, events, ranks = dict(watched), [], 0, 0
    for line in open(log, errors="replace"):
        if f"job {job} [" not in line:
            continue
        m = re.search(r"checkpoint_committed: step (\d+):", line)
        if m:
            s = int(m.group(1))
            committed[s] = min(committed.get(s, ts(line)), ts(line))
        m = re.search(r"resumed: resumed from (?:step \d+ \(\w+\): )?\S+ at step (\d+)", line)
        if m:
            events += 1
            s = int(m.group(1))
            if s not in committed or committed[s] > ts(line):
                problems.append(f"coordinator resumed step {s}, not committed before: {line.strip()}")
    for path in sorted(glob.glob(os.path.join(jobs_dir, job, "attempt_*", "rank_*.log"))):
        for line in open(path, errors="replace"):
            m = re.search(r"resumed from (\S+) \(step (\d+),", line)
            if m:
                ranks += 1
                s = int(m.group(2))
                if s not in committed or committed[s] > ts(line):
                    problems.append(f"{path}: resumed step {s}, not committed before: {line.strip()}")
    return events, ranks, len(committed), problems


def logged_commits(log, job):
    steps = set()
    for line in open(log, errors="replace"):
        m = re.search(rf"job {re.escape(job)} \[.*checkpoint_committed: step (\d+):", line)
        if m:
            steps.add(int(m.group(1)))
    return steps


def soak(c, a, rng):
    t_start = time.time()
    os.makedirs(os.path.join(c.tmp, "data"))
    subprocess.run([sys.executable, os.path.join(a.src, "configs", "data", "make_tokens.py"),
                    os.path.join(c.tmp, "data", "phrases.u32")], check=True, capture_output=True)
    c.start()
    print(f"chaos soak: seed {a.seed}, {a.kills} disruptions, {a.steps} steps, world {a.world}, checkpoint every "
          f"{a.every} steps" + (f", memory tier every {a.memory_every} in {a.memory_root}" if a.memory_every else "") +
          f"; dir {c.tmp}", flush=True)
    t0 = time.time()
    ref = c.ctl("submit", write_job(c.tmp, "ref", a.steps, a.world, a.every, a.memory_every, a.memory_root)).strip()
    c.ctl("watch", ref)
    if c.status(ref).get("state") != "SUCCEEDED":
        raise SoakFailure("the uninterrupted run did not succeed: " + c.ctl("status", ref, check=False))
    ref_s = time.time() - t0
    print(f"uninterrupted run: {a.steps} steps in {ref_s:.0f} s", flush=True)

    watcher = CommitWatcher([os.path.join(c.tmp, "ckpt", "soak", "step_*"),
                             os.path.join(a.memory_root, "soak-*", "step_*")])
    watcher.start()
    c.open_gate(0)  # the soak job waits at its first step until disrupt() opens the gate
    job = c.ctl("submit", write_job(c.tmp, "soak", a.steps, a.world, a.every, a.memory_every, a.memory_root)).strip()
    counts = {"worker SIGKILL": 0, "coordinator SIGKILL": 0, "worker SIGSTOP": 0}
    seen, stopped, kills, expected = set(), [], 0, []
    while kills < a.kills:
        if disrupt(c, job, rng, counts, seen, stopped, a, kills, expected) is not False:
            kills += 1
    c.open_gate(1 << 40)
    c.ctl("watch", job, check=False)
    st = c.status(job)
    if st.get("state") != "SUCCEEDED":
        raise SoakFailure("the soaked job did not succeed: " + c.ctl("status", job, check=False))
    wall = time.time() - t_start
    time.sleep(3)  # the coordinator's kill grace for stragglers of ended attempts
    left = [p for p in sorted(seen) if c.ours(p)]
    problems = [f"worker {p} outlived the job{' (it was SIGSTOPped)' if p in stopped else ''}" for p in left]

    identical = filecmp.cmp(os.path.join(c.tmp, "out", "ref", "model.safetensors"),
                            os.path.join(c.tmp, "out", "soak", "model.safetensors"), shallow=False)
    watcher.stop.set()
    watcher.join()
    events, ranks, commits, resume_problems = check_resumes(c.log, os.path.join(c.state, "jobs"), job, watcher.seen)
    problems += resume_problems + watcher.bad
    unlogged = sorted(set(watcher.seen) - logged_commits(c.log, job))
    memory_left = glob.glob(os.path.join(a.memory_root, "soak-*")) if a.memory_every else []
    if memory_left:  # the coordinator removes an ended job's tmpfs folder
        problems.append(f"the ended job's memory tier is still there: {memory_left}")
    resumes = [ln for ln in open(c.log, errors="replace") if f"job {job} [" in ln and "resumed: resumed from" in ln]
    from_memory = sum(1 for ln in resumes if "(memory)" in ln)
    # Each aimed kill is judged by the first resume after it: from the aimed
    # step and tier (a hit), from a newer commit (the ranks committed again
    # before the kill landed: elsewhere, fine), or from an older step (the
    # aimed commit was lost: a failure). An attempt killed again before it
    # said where it resumed leaves nothing to judge.
    said = []  # (seconds since the epoch, step, tier), in log order
    for ln in resumes:
        m = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) .*resumed from step (\d+) \((\w+)\)", ln)
        if m:
            said.append((datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp(), int(m.group(2)), m.group(3)))
    missed, older = [], []
    for s, t, when in expected:
        after = next(((step, tier) for at, step, tier in said if at >= when), None)
        if after != (s, t):
            missed.append(f"step {s} ({t})")
        if after is not None and after[0] < s:
            older.append(f"step {s} ({t}): resumed from step {after[0]} ({after[1]})")
    if older:
        problems.append(f"worker kills after {'; '.join(older)}, an older step")
    for tier in ("memory", "disk"):
        aimed_at = [s for s, t, _ in expected if t == tier]
        if aimed_at and all(f"step {s} ({tier})" in missed for s in aimed_at):
            problems.append(f"no worker kill after a {tier} step was resumed from that step and tier")
    if a.memory_every and not any(t == "memory" for _, t, _ in expected):
        problems.append("no worker SIGKILL landed after a memory step (raise --kills or change --seed)")
    ref_loss = {r["step"]: r["loss"] for r in map(json.loads, c.ctl("metrics", ref, "--json").splitlines())}
    for r in map(json.loads, c.ctl("metrics", job, "--json").splitlines()):
        if ref_loss.get(r["step"]) != r["loss"]:
            problems.append(f"step {r['step']}: loss {r['loss']} != the uninterrupted run's {ref_loss.get(r['step'])}")
            break
    attempts = int(st.get("attempt", 0))
    print(f"""chaos soak figures (seed {a.seed})
  disruptions:          {kills} ({counts['worker SIGKILL']} worker SIGKILL, {counts['coordinator SIGKILL']} coordinator SIGKILL + restart, {counts['worker SIGSTOP']} worker SIGSTOP)
  attempts:             {attempts} ({attempts - 1} restarts)
  coordinator restarts: {counts['coordinator SIGKILL']}
  resumes:              {events} resumed events ({from_memory} from a memory step), {ranks} rank resumes; {len(resume_problems)} of an uncommitted step ({commits} steps committed)
  aimed kills:          {len(expected)} ({sum(t == 'memory' for _, t, _ in expected)} after a memory step, {sum(t == 'disk' for _, t, _ in expected)} after a disk step; {len(missed)} resumed elsewhere)
  commits without event: {len(unlogged)} {unlogged[:10]} (COMMITTED on disk, no checkpoint_committed event)
  steps:                {a.steps} (uninterrupted run {ref_s:.0f} s)
  wall time:            {wall:.0f} s
  identical weights:    {'yes' if identical else 'NO'}""", flush=True)
    if unlogged:
        problems.append(f"committed step(s) {unlogged[:10]} have no checkpoint_committed event")
    if not identical:
        problems.append("the exported weights differ from the uninterrupted run's")
    if problems:
        raise SoakFailure("\n".join(problems[:10]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--steps", type=int, default=0, help="default: 15 per disruption + 60")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("SHARDD_CHAOS_SEED", "0")) or random.randrange(1 << 30))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--every", type=int, default=5, help="checkpoint.every_steps")
    ap.add_argument("--memory-every", type=int, default=0, help="checkpoint.memory.every_steps (0: no memory tier)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    a = ap.parse_args()
    a.steps = a.steps or a.kills * 15 + 60
    a.src = os.environ.get("SHARDD_SOURCE_DIR") or sys.exit("SHARDD_SOURCE_DIR must point at the source dir")
    bin_dir = os.environ.get("SHARDD_BIN_DIR") or sys.exit("SHARDD_BIN_DIR must point at the build dir")
    c = Cluster(os.path.abspath(bin_dir), tempfile.mkdtemp(prefix="shardd-chaos."))
    # The memory tier's root: tmpfs when there is one, one per soak.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else c.tmp
    a.memory_root = os.path.join(shm, f"shardd-chaos.{os.getpid()}")
    try:
        soak(c, a, random.Random(a.seed))
        print("PASS")
        return 0
    except SoakFailure as e:
        print(f"FAIL: {e}\n--- shardd.log (tail)\n{tail(c.log)}", file=sys.stderr)
        a.keep = True
        return 1
    finally:
        if c.proc and c.proc.poll() is None:
            c.kill()
        for p in c.our_workers():  # by this coordinator's unique address only
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
        if a.keep:
            print(f"kept {c.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(c.tmp, ignore_errors=True)
        shutil.rmtree(a.memory_root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
