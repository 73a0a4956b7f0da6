"""The aryl Python API, end to end: examples/python/elastic_mlp.py under
aryl-rt-launch (real processes, Gloo on loopback) resized while it trains,
compared with a fixed-size run of the same program; plus in-process checks
of the state sources and of the runtime's errors.

Run by ctest with ARYL_RT_LAUNCH, ARYL_EXAMPLES and PYTHONPATH set:
    /usr/bin/python3 tests/runtime/python/elastic_py_test.py [TestName]
"""
import collections
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import torch

import aryl

LAUNCH = os.environ.get("ARYL_RT_LAUNCH", "build/runtime/aryl-rt-launch")
ARYL_RUN = os.environ.get("ARYL_RUN", "build/cli/aryl-run")
EXAMPLES = os.environ.get("ARYL_EXAMPLES", "examples/python")
DATASET, GLOBAL_BATCH = 200, 24
MODEL = ["--dataset", str(DATASET), "--global-batch", str(GLOBAL_BATCH), "--features", "16", "--hidden", "32",
         "--layers", "1", "--classes", "4", "--lr", "0.01"]
ENV = {"ARYL_FAULT_SETTLE_MS": "1000", "ARYL_COLLECTIVE_TIMEOUT_MS": "20000", "ARYL_RENDEZVOUS_TIMEOUT_MS": "30000"}


def read(path):
    with open(path) as f:
        return f.read()


def run_example(tmp, name, workers, steps, schedule="", optimizer="adam", sleep_ms=0, dropout=0.0, loop="steps"):
    """Runs elastic_mlp.py under aryl-rt-launch; returns (launcher output, params, samples dir)."""
    out_dir = os.path.join(tmp, name)
    samples = os.path.join(out_dir, "samples")
    os.makedirs(samples)
    final = os.path.join(out_dir, "final.pt")
    cmd = [LAUNCH, "--workers", str(workers), "--timeout", "240", "--log-dir", out_dir]
    if schedule:
        cmd += ["--schedule", schedule]
    cmd += ["--", sys.executable, os.path.join(EXAMPLES, "elastic_mlp.py"), "--steps", str(steps), "--optimizer",
            optimizer, "--sleep-ms", str(sleep_ms), "--out", final, "--samples-dir", samples,
            "--dropout", str(dropout), "--loop", loop] + MODEL
    proc = subprocess.run(cmd, env=dict(os.environ, **ENV), capture_output=True, text=True, timeout=300)
    logs = "".join(f"==== {f}\n" + read(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))
                   if f.endswith(".log"))
    if proc.returncode != 0 or not os.path.exists(final):
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}\n{logs}")
    return proc.stdout + logs, torch.load(final), samples


def committed_samples(samples_dir):
    """worker -> list of (step, epoch, pid, indices) from the workers' sample files."""
    out = {}
    for f in os.listdir(samples_dir):
        rows = []
        for line in read(os.path.join(samples_dir, f)).splitlines():
            step, epoch, pid, *idx = map(int, line.split())
            rows.append((step, epoch, pid, idx))
        out[f[:-4]] = rows
    return out


class ResizeMatchesFixedRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="aryl_py_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, optimizer, schedule, steps, expected_workers, dropout=0.0, loop="steps"):
        _, reference, _ = run_example(self.tmp, "fixed", 2, steps, optimizer=optimizer, dropout=dropout)
        # 50 ms a step: the run outlasts its joiners' start (a Python process
        # importing torch, 4-5 s each on a loaded 2-core machine), so every
        # planned change lands before the stayers finish.
        output, params, samples_dir = run_example(self.tmp, "resized", 2, steps, schedule, optimizer, sleep_ms=50,
                                                  dropout=dropout, loop=loop)
        # Every planned change took effect while training.
        worlds = [w for _, w in (item.split(":") for item in schedule.split(","))]
        for world in worlds:
            self.assertRegex(output, rf"resize to {world}: gen \d+", output)
        self.assertIn("planned=1", output)
        # Final parameters: those of the fixed-size run (same tolerance as the C++ test).
        self.assertEqual(len(reference), len(params))
        for i, (a, b) in enumerate(zip(reference, params)):
            self.assertTrue(torch.allclose(a, b, rtol=1e-4, atol=1e-5),
                            f"param {i}: max abs diff {(a - b).abs().max().item()}")
        # Every sample of every epoch exactly once; every step committed once.
        rows = committed_samples(samples_dir)
        self.assertEqual(len(rows), expected_workers)
        by_epoch = collections.defaultdict(list)
        steps_seen = set()
        for worker_rows in rows.values():
            for step, epoch, _, idx in worker_rows:
                by_epoch[epoch].extend(idx)
                steps_seen.add(step)
        self.assertEqual(steps_seen, set(range(steps)))
        last = max(by_epoch)
        for epoch, idx in by_epoch.items():
            self.assertEqual(len(idx), len(set(idx)), f"epoch {epoch} has duplicate samples")
            if epoch < last:
                self.assertEqual(sorted(idx), list(range(DATASET)), f"epoch {epoch} is incomplete")
        # Stayers keep their process: one pid per worker, the one the launcher started;
        # w0 stayed in every generation and committed every step.
        launched = dict(re.findall(r"aryl-rt-launch: worker (\w+) pid (\d+)", output))
        for worker, worker_rows in rows.items():
            pids = {pid for _, _, pid, _ in worker_rows}
            self.assertEqual(pids, {int(launched[worker])}, worker)
        self.assertEqual(sorted(s for s, _, _, _ in rows["w0"]), list(range(steps)))

    def test_adam_2_4_3_1_2(self):
        self.check("adam", "10:4,20:3,30:1,40:2", 300, 5)

    def test_dropout_adam_2_4_3_1_2(self):
        # aryl.SampleDropout(0.3) after each hidden layer: per-sample masks, so the same tolerance holds.
        self.check("adam", "10:4,20:3,30:1,40:2", 300, 5, dropout=0.3)

    def test_sgd_momentum_2_3_1(self):
        self.check("sgd", "10:3,20:1", 300, 3)

    def test_adamw_2_4_2(self):
        self.check("adamw", "10:4,20:2", 300, 4)

    def test_epoch_loop_adam_2_4_1_2(self):
        # The usual epoch shape (DataLoader over sampler.epoch_batches(), one rt.step() per batch),
        # resized in place: the fixed step loop's parameters, every sample once per epoch.
        self.check("adam", "10:4,20:1,30:2", 300, 5, loop="epochs")


class UnderArylRun(unittest.TestCase):
    """aryl-run --standalone (embedded scheduler and agents): the job grows onto a loanable
    inference agent's slots and shrinks when the scheduler reclaims them."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="aryl_py_run_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_loaned_slots_match_fixed_run(self):
        steps = 400
        _, reference, _ = run_example(self.tmp, "fixed", 2, steps)
        samples = os.path.join(self.tmp, "samples")
        os.makedirs(samples)
        final = os.path.join(self.tmp, "final.pt")
        cmd = [ARYL_RUN, "--standalone", "--slots", "2", "--min", "1", "--max", "4", "--loan-slots", "2",
               "--inference-demand", "daily:peak=0.9,trough=0.1", "--demand-time-scale", "2880",
               "--work-dir", os.path.join(self.tmp, "work"), "--follow-logs", os.path.join(self.tmp, "work"), "--",
               sys.executable, os.path.join(EXAMPLES, "elastic_mlp.py"), "--steps", str(steps), "--sleep-ms", "30",
               "--out", final, "--samples-dir", samples] + MODEL
        proc = subprocess.run(cmd, env=dict(os.environ, **ENV), capture_output=True, text=True, timeout=300)
        output = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, output[-5000:])
        # The loaned server may be offered before the job starts (then it starts at
        # 4) or after (then it grows 2 -> 4); either way it trains on the loaned
        # slots.
        self.assertRegex(output, r"(from_world=2 to_world=4 .*planned=1|step=\d+ loss=\S+ world=4 )",
                         "never ran on the loaned slots")
        for i, (a, b) in enumerate(zip(reference, torch.load(final))):
            self.assertTrue(torch.allclose(a, b, rtol=1e-4, atol=1e-5),
                            f"param {i}: max abs diff {(a - b).abs().max().item()}")
        rows = committed_samples(samples)
        by_epoch = collections.defaultdict(list)
        for worker, worker_rows in rows.items():
            # A joiner that left again before its first committed step has no rows.
            self.assertLessEqual(len({pid for _, _, pid, _ in worker_rows}), 1, f"worker {worker} changed process")
            for _, epoch, _, idx in worker_rows:
                by_epoch[epoch].extend(idx)
        for epoch, idx in by_epoch.items():
            self.assertEqual(len(idx), len(set(idx)), f"epoch {epoch} has duplicate samples")
            if epoch < max(by_epoch):
                self.assertEqual(sorted(idx), list(range(DATASET)), f"epoch {epoch} is incomplete")
        self.assertEqual(sorted(s for s, _, _, _ in rows["0"]), list(range(steps)), "worker 0 did not stay")

    def test_early_clean_exit_is_a_leave_and_the_job_grows_back(self):
        """Rank 1 of a 1..2-worker job raises SystemExit(0) at step 60 of 300: a leave, not the
        job's completion. Rank 0 trains on at 1 worker, the scheduler grows the job back into the
        free slot, and the job ends at 300 steps on 2 workers with aryl-run's exit 0."""
        steps = 300
        # --log-level info: the scheduler's info lines (standalone logs warnings only by default).
        cmd = [ARYL_RUN, "--standalone", "--slots", "2", "--min", "1", "--max", "2", "--log-level", "info",
               "--work-dir", os.path.join(self.tmp, "work"), "--follow-logs", os.path.join(self.tmp, "work"), "--",
               sys.executable, os.path.join(EXAMPLES, "elastic_mlp.py"), "--steps", str(steps), "--sleep-ms", "30",
               "--exit-rank", "1", "--exit-step", "60"] + MODEL
        proc = subprocess.run(cmd, env=dict(os.environ, **ENV), capture_output=True, text=True, timeout=300)
        output = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, output[-5000:])
        # The scheduler's own words (aryl-run --standalone logs them): a leave, not the job's end.
        self.assertRegex(output, r"worker \d+ \(rank 1\) on \S+ ended early \(step 60\).*a leave, not the job's end",
                         "rank 1's exit was not taken as a leave")
        worlds = [(int(s), int(w)) for s, w in re.findall(r"step=(\d+) loss=\S+ world=(\d)", output)]
        self.assertTrue(any(w == 1 and s > 60 for s, w in worlds), f"never trained at 1 worker after the leave: {worlds}")
        self.assertTrue(any(w == 2 and s > 60 for s, w in worlds), f"never grew back to 2 workers: {worlds}")
        self.assertRegex(output, rf"done steps={steps} world=2 ", output[-5000:])


class TorchrunScript(unittest.TestCase):
    def test_unmodified_ddp_script_runs_at_fixed_size(self):
        """aryl-rt-launch gives workers torchrun's variables: init_process_group("gloo") works."""
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_script.py")
        proc = subprocess.run([LAUNCH, "--workers", "3", "--job", "ddp7", "--", sys.executable, script],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        found = re.findall(r"ddp rank=(\d) world=3 run_id=ddp7 checksum=(-?[0-9]+\.[0-9]{10})", proc.stdout)
        self.assertEqual(sorted(r for r, _ in found), ["0", "1", "2"], proc.stdout)
        self.assertEqual(len({c for _, c in found}), 1, "ranks ended with different parameters")


    def test_unmodified_ddp_script_under_aryl_run(self):
        """The agent gives workers torchrun's variables too (aryl-run --standalone, fixed size)."""
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_script.py")
        work = tempfile.mkdtemp(prefix="aryl_py_ddp_")
        try:
            proc = subprocess.run([ARYL_RUN, "--standalone", "--nproc-per-node", "2", "--work-dir", work, "--", sys.executable,
                                   script], capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            logs = "".join(read(os.path.join(work, "logs", "job-1", f)) for f in ("worker-0.out", "worker-1.out"))
            found = re.findall(r"ddp rank=(\d) world=2 run_id=1 checksum=(-?[0-9]+\.[0-9]{10})", logs)
            self.assertEqual(sorted(r for r, _ in found), ["0", "1"], logs)
            self.assertEqual(len({c for _, c in found}), 1, "ranks ended with different parameters")
        finally:
            shutil.rmtree(work, ignore_errors=True)


ARYL = os.environ.get("ARYL", "build/cli/aryl")
HERE = os.path.dirname(os.path.abspath(__file__))


def wait_for(what, cond, proc, logs, deadline_s=180):
    """Polls cond() until it returns a true value; fails naming `what` (with the
    job's output) at the deadline or when aryl-run exits first."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"waiting for {what}: " + ("aryl-run exited " + str(proc.returncode) if proc.poll()
                                                    is not None else f"not within {deadline_s} s") + "\n" + logs())


class TorchrunRestart(unittest.TestCase):
    """A plain torch.distributed DDP script (examples/python/torchrun_ddp.py: no aryl import, its own
    checkpoint in --cwd) under aryl-run --standalone: at a fixed size, then resized
    restart-style 2 -> 4 -> 2 by lending the inference agent's slots (aryl pool
    offer) and taking them back (aryl pool reclaim). Each resize stops every worker
    and starts the group again at the new size with TORCHELASTIC_RESTART_COUNT one
    higher; the script resumes from its checkpoint and ends at the fixed run's
    parameters and step."""
    STEPS = 200

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="aryl_py_restart_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_dir(self, name):
        path = os.path.join(self.tmp, name)
        os.makedirs(path)
        return path

    def test_restart_resizes_2_4_2_resume_from_own_checkpoint(self):
        script = os.path.join(EXAMPLES, "torchrun_ddp.py")
        fixed = self.run_dir("fixed")
        proc = subprocess.run([ARYL_RUN, "--standalone", "--nproc-per-node", "2", "--work-dir",
                               os.path.join(self.tmp, "aryl-fixed"), "--cwd", fixed, "--", sys.executable, script,
                               "--steps", str(self.STEPS)], capture_output=True, text=True, timeout=240)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertRegex(read(os.path.join(fixed, "starts.log")), r"^restart_count=0 world=2 step=0 ")
        reference = torch.load(os.path.join(fixed, "final.pt"))

        cwd = self.run_dir("resized")
        env_file = os.path.join(self.tmp, "job.env")
        with open(env_file, "w") as f:
            f.write("# set for the workers by --env-file\nOMP_NUM_THREADS=1\nDDP_MARKER='from-the-env-file'\n")
        err_path = os.path.join(self.tmp, "aryl-run.err")
        out_path = os.path.join(self.tmp, "aryl-run.out")
        work = os.path.join(self.tmp, "aryl-resized")
        cmd = [ARYL_RUN, "--standalone", "--nproc-per-node", "2", "--nnodes", "1:2", "--slots", "2", "--loan-slots",
               "2", "--elastic", "restart", "--work-dir", work, "--cwd", cwd, "--env-file", env_file, "--",
               sys.executable, script, "--steps", str(self.STEPS), "--sleep-ms", "40"]
        with open(err_path, "w") as err, open(out_path, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=dict(os.environ, ARYL_CONFIG="/dev/null"))
        try:
            def logs():
                text = read(err_path)[-4000:] + read(out_path)[-2000:]
                if os.path.exists(os.path.join(cwd, "starts.log")):
                    text += "\nstarts.log:\n" + read(os.path.join(cwd, "starts.log"))
                return text

            def progress():
                try:
                    step, world, _ = read(os.path.join(cwd, "progress.txt")).split()
                    return int(step), int(world)
                except (OSError, ValueError):
                    return None

            def starts():
                path = os.path.join(cwd, "starts.log")
                if not os.path.exists(path):
                    return []
                return [dict(kv.split("=", 1) for kv in line.split()) for line in read(path).splitlines()]

            endpoint = wait_for("the standalone scheduler", lambda: re.search(r"standalone scheduler on (\S+),",
                                                                                read(err_path)), proc, logs).group(1)

            def aryl(*args):
                r = subprocess.run([ARYL] + list(args) + ["--scheduler", endpoint], capture_output=True, text=True,
                                   timeout=60, env=dict(os.environ, ARYL_CONFIG="/dev/null"))
                self.assertEqual(r.returncode, 0, f"aryl {' '.join(args)}: {r.stdout}{r.stderr}")

            def trained_at(world, steps_after):
                def check():
                    s, p = starts(), progress()
                    return p and s and s[-1]["world"] == str(world) and p[1] == world and \
                        p[0] >= int(s[-1]["step"]) + steps_after
                return check

            wait_for("20 steps at 2 workers", trained_at(2, 20), proc, logs)
            aryl("pool", "offer", "loan")
            wait_for("a restart at 4 workers and 20 steps there", trained_at(4, 20), proc, logs)
            aryl("pool", "reclaim", "--servers", "loan", "--deadline", "120s")
            wait_for("a restart at 2 workers", lambda: len(starts()) >= 3, proc, logs)
            proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 0, logs())
        runs = starts()
        self.assertEqual([r["world"] for r in runs], ["2", "4", "2"], logs())
        # TORCHELASTIC_RESTART_COUNT counts the restarts; every start is a new
        # process group that resumed from the script's own checkpoint.
        self.assertEqual([r["restart_count"] for r in runs], ["0", "1", "2"], logs())
        self.assertEqual(runs[0]["step"], "0")
        resumed = [int(r["step"]) for r in runs]
        self.assertTrue(0 < resumed[1] < resumed[2] < self.STEPS, resumed)
        self.assertEqual(len({r["pid"] for r in runs}), 3)
        self.assertEqual(progress(), (self.STEPS, 2))
        self.assertEqual(torch.load(os.path.join(cwd, "checkpoint.pt"))["step"], self.STEPS)
        self.assertIn("restarting all workers", read(err_path))
        self.assertIn("marker=from-the-env-file", read(os.path.join(cwd, "starts.log")))
        # The pause of each restart: from the last step at the old size to the
        # first at the new one (work redone since the checkpoint not counted).
        steps = [line.split() for line in read(os.path.join(cwd, "steps.log")).splitlines()]
        pauses = [float(b[2]) - float(a[2]) for a, b in zip(steps, steps[1:]) if a[1] != b[1]]
        self.assertEqual(len(pauses), 2, steps)
        # Each stop was noticed (SIGTERM, $ARYL_STOP_NOTICE): the ranks agreed on
        # a step, rank 0 checkpointed it, and the next start resumed there.
        last_before = [int(a[0]) for a, b in zip(steps, steps[1:]) if a[1] != b[1]]
        self.assertEqual(resumed[1:], last_before, logs())
        # It trained something (its labels follow a teacher): the last steps'
        # loss is well under the first steps'.
        first = sum(float(s[3]) for s in steps[:10]) / 10
        last = sum(float(s[3]) for s in steps[-10:]) / 10
        self.assertLess(last, 0.5 * first, f"loss {first:.3f} -> {last:.3f}")
        sys.stderr.write(f"restart pauses: {' '.join(f'{p:.2f}' for p in pauses)} s (2->4, 4->2)\n")
        final = torch.load(os.path.join(cwd, "final.pt"))
        for i, (a, b) in enumerate(zip(reference, final)):
            self.assertTrue(torch.allclose(a, b, rtol=1e-4, atol=1e-5),
                            f"param {i}: max abs diff {(a - b).abs().max().item()}")

    def test_max_restarts_restarts_a_failed_group(self):
        """--max-restarts 1: rank 1 fails on the first start; the whole group starts again
        (TORCHELASTIC_RESTART_COUNT=1) and completes. With --max-restarts 0 the job fails."""
        code = ("import os, sys, time\n"
                "c, r = int(os.environ['TORCHELASTIC_RESTART_COUNT']), int(os.environ['RANK'])\n"
                "names = ('TORCHELASTIC_MAX_RESTARTS', 'ROLE_RANK', 'ROLE_WORLD_SIZE', 'GROUP_WORLD_SIZE', 'MASTER_PORT')\n"
                "open(f'rank{r}-start{c}', 'w').write(' '.join(os.environ[n] for n in names))\n"
                "if c == 0 and r == 1:\n"
                "    for _ in range(600):  # fail only once rank 0 has started (its file is there)\n"
                "        if os.path.exists('rank0-start0'): break\n"
                "        time.sleep(0.05)\n"
                "    sys.exit(3)\n"
                "if c == 0: time.sleep(120)  # waits for its failed peer, as in a collective\n")
        for limit, expected_rc in ((1, 0), (0, 3)):
            cwd = self.run_dir(f"limit{limit}")
            proc = subprocess.run([ARYL_RUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", str(limit),
                                   "--work-dir", os.path.join(self.tmp, f"aryl{limit}"), "--cwd", cwd, "--",
                                   sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, expected_rc, proc.stdout + proc.stderr)
            started = sorted(os.listdir(cwd))
            if limit:
                self.assertEqual(started, ["rank0-start0", "rank0-start1", "rank1-start0", "rank1-start1"])
                self.assertIn("restart 1 of 1", proc.stderr)
                # torchrun's other variables; MASTER_PORT from the scheduler's --port-range.
                env = read(os.path.join(cwd, "rank1-start1")).split()
                self.assertEqual(env[:4], ["1", "1", "2", "1"], env)
                self.assertTrue(20000 <= int(env[4]) <= 32767, env)
                self.assertEqual(read(os.path.join(cwd, "rank0-start1")).split()[4], env[4])
            else:
                self.assertEqual(started, ["rank0-start0", "rank1-start0"])
                self.assertIn("exited with 3 (0 of max 0 restarts used)", proc.stderr)

    def test_missing_cwd_is_an_exec_error(self):
        """A --cwd that does not exist fails the start with the agent's error, in aryl-run's output."""
        missing = os.path.join(self.tmp, "no-such-dir")
        proc = subprocess.run([ARYL_RUN, "--standalone", "--nproc-per-node", "1", "--work-dir",
                               os.path.join(self.tmp, "aryl"), "--cwd", missing, "--", sys.executable, "-c", "pass"],
                              capture_output=True, text=True, timeout=120)
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"chdir {missing}: No such file or directory", proc.stderr)

    def test_help_lists_the_torchrun_mapping(self):
        out = subprocess.run([ARYL_RUN, "--help"], capture_output=True, text=True, timeout=30,
                             env=dict(os.environ, ARYL_CONFIG="/dev/null")).stdout
        for flag in ("--nproc-per-node N", "--nnodes MIN:MAX", "--max-restarts K", "--rdzv-id ID", "--standalone",
                     "--elastic", "--env-file", "--cwd"):
            self.assertIn(flag, out)

    def test_bad_env_file_names_file_and_line(self):
        """A bad --env-file line is a usage error (200) naming file:line, before anything starts."""
        env_file = os.path.join(self.tmp, "bad.env")
        with open(env_file, "w") as f:
            f.write("A=1\n# fine\nnot an assignment\n")
        proc = subprocess.run([ARYL_RUN, "--standalone", "--env-file", env_file, "--", sys.executable, "-c", "pass"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 200, proc.stdout + proc.stderr)  # aryl-run's own usage code
        self.assertIn(f"{env_file}:3: expected KEY=VALUE, got 'not an assignment'", proc.stderr)


class DdpPort(unittest.TestCase):
    """ddp_epochs.py (torch's DDP in the usual epoch shape) and ddp_epochs_aryl.py, its port by
    aryl's torch.distributed names: few changed lines; at the torchrun size the same batches and
    the same parameters as under torch; resized 2 -> 3 -> 2 in place, every sample once per epoch."""

    HERE = os.path.dirname(os.path.abspath(__file__))

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="aryl_py_port_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_script(self, name, script, schedule="", epochs=6, sleep_ms=0):
        out = os.path.join(self.tmp, name)
        os.makedirs(out)
        cmd = [LAUNCH, "--workers", "2", "--timeout", "200"] + (["--schedule", schedule] if schedule else [])
        cmd += ["--", sys.executable, os.path.join(self.HERE, script), "--epochs", str(epochs), "--sleep-ms",
                str(sleep_ms), "--out", out]
        proc = subprocess.run(cmd, env=dict(os.environ, **ENV), capture_output=True, text=True, timeout=250)
        output = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, output[-5000:])
        rows = {}  # pid -> [(epoch, loss, indices)]
        for f in os.listdir(out):
            if f.startswith("samples-"):
                rows[int(f[8:-4])] = [(int(e), float(loss), list(map(int, idx)))
                                      for e, loss, *idx in (line.split() for line in read(os.path.join(out, f)).splitlines())]
        return output, rows, torch.load(os.path.join(out, "snapshot.pt"))

    def test_port_changes_few_lines(self):
        def code(name):  # without the module docstring
            text = read(os.path.join(self.HERE, name))
            return text[text.index('"""', 3) + 3:].splitlines()
        ops = difflib.SequenceMatcher(a=code("ddp_epochs.py"), b=code("ddp_epochs_aryl.py"), autojunk=False).get_opcodes()
        changed = sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in ops if op != "equal")
        print(f"ddp_epochs.py -> ddp_epochs_aryl.py: {changed} changed lines")
        self.assertLessEqual(changed, 10)

    def test_fixed_size_matches_torch_and_resize_keeps_every_sample(self):
        _, theirs, their_snap = self.run_script("torch", "ddp_epochs.py")
        _, ours, our_snap = self.run_script("aryl", "ddp_epochs_aryl.py")
        # Rank r's batches, epoch by epoch, are those of torch's DistributedSampler, and so the parameters.
        key = lambda rows: sorted([(e, idx) for e, _, idx in r] for r in rows.values())
        self.assertEqual(key(ours), key(theirs))
        self.assertEqual(our_snap["epoch"], their_snap["epoch"])
        for name, a in their_snap["model"].items():
            self.assertTrue(torch.allclose(a, our_snap["model"][name], rtol=1e-5, atol=1e-6), name)
        # Resized while it trains: 13 steps an epoch at 2, 9 at 3 (per-rank batch 8 of 200 samples).
        epochs = 30
        # 50 ms a step (as ResizeMatchesFixedRun): the run outlasts a joiner's start on a loaded machine.
        output, rows, snap = self.run_script("resized", "ddp_epochs_aryl.py", "40:3,160:2", epochs, sleep_ms=50)
        for world in (3, 2):
            self.assertRegex(output, rf"resize to {world}: gen \d+", output[-5000:])
        launched = {int(pid) for pid in re.findall(r"aryl-rt-launch: worker \w+ pid (\d+)", output)}
        self.assertEqual(len(launched), 3)
        self.assertLessEqual(set(rows), launched, "a worker changed process")
        by_epoch, losses = collections.defaultdict(list), collections.defaultdict(list)
        for worker_rows in rows.values():
            for e, loss, idx in worker_rows:
                by_epoch[e] += idx
                losses[e].append(loss)
        self.assertEqual(sorted(by_epoch), list(range(epochs)))
        for e, idx in by_epoch.items():
            self.assertEqual(sorted(idx), list(range(200)), f"epoch {e}: not every sample once")
        self.assertEqual(snap["epoch"], epochs - 1)
        mean = lambda e: sum(losses[e]) / len(losses[e])
        self.assertLess(mean(epochs - 1), 0.5 * mean(0), "it did not train")


class DocsSnippets(unittest.TestCase):
    def test_python_blocks_parse(self):
        """Every python block of README.md and docs/runtime.md is valid Python (the C++ blocks
        are compiled by the build: runtime_doc_snippets)."""
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
        count = 0
        for doc in ("README.md", os.path.join("docs", "runtime.md")):
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", read(os.path.join(root, doc)), re.S)):
                compile(block, f"{doc} python block {i + 1}", "exec")
                count += 1
        self.assertGreater(count, 0)


class InProcess(unittest.TestCase):
    def train(self, model, opt, steps=3):
        torch.manual_seed(5)
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()

    def test_checkpoint_round_trip_moves_optimizer_state(self):
        for make in (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.Adam(p, lr=0.01),
                     lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)):
            torch.manual_seed(1)
            a = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
            opt_a = make(a.parameters())
            self.train(a, opt_a)
            values = {"best": 0.5}
            data = aryl.ElasticState(model=a, optimizer=opt_a, values=values).serialize()
            torch.manual_seed(2)
            b = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
            opt_b = make(b.parameters())
            opt_b.param_groups[0]["lr"] = 123.0
            restored = {}
            aryl.ElasticState(model=b, optimizer=opt_b, values=restored).deserialize(data)
            name = type(opt_a).__name__
            self.assertEqual(restored, values)
            self.assertEqual(opt_b.param_groups[0]["lr"], opt_a.param_groups[0]["lr"], name)
            for x, y in zip(a.state_dict().values(), b.state_dict().values()):
                self.assertTrue(torch.equal(x, y), name)
            for pa, pb in zip(a.parameters(), b.parameters()):
                sa, sb = opt_a.state[pa], opt_b.state[pb]
                self.assertEqual(sorted(sa), sorted(sb), name)
                for k in sa:
                    self.assertTrue(torch.equal(torch.as_tensor(sa[k]), torch.as_tensor(sb[k])), f"{name} {k}")
            # Both continue identically.
            self.train(a, opt_a)
            self.train(b, opt_b)
            for pa, pb in zip(a.parameters(), b.parameters()):
                self.assertTrue(torch.equal(pa, pb), name)

    def test_torch_names_refuse_what_they_cannot_keep(self):
        data = list(range(10))
        with self.assertRaisesRegex(ValueError, "needs num_replicas"):
            aryl.DistributedSampler(data)
        with self.assertRaisesRegex(ValueError, "drop_last=True is not supported"):
            aryl.DistributedSampler(data, num_replicas=2, batch_size=2, drop_last=True)
        s = aryl.DistributedSampler(data, num_replicas=2, batch_size=2)
        s.set_epoch(0)
        with self.assertRaisesRegex(ValueError, r"set_epoch\(3\): the runtime is at epoch 0 .*sampler.epoch"):
            s.set_epoch(3)
        with self.assertRaisesRegex(RuntimeError, "wrap the model in aryl.DistributedDataParallel"):
            list(s)
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(data, batch_size=3, sampler=s)
        with self.assertRaisesRegex(ValueError, "batch_size=3 differs from its sampler's batch_size=2"):
            aryl.DistributedDataParallel(model, opt, loader)
        with self.assertRaisesRegex(TypeError, "not an aryl.DistributedSampler"):
            aryl.DistributedDataParallel(model, opt, torch.utils.data.DataLoader(data, batch_size=2))
        with self.assertRaisesRegex(ValueError, "leave these unset"):
            aryl.init_process_group("gloo", world_size=2, rank=0)
        # An epoch's last step with fewer samples than ranks: the empty rank trains on one sample at weight 0.
        s = aryl.DistributedSampler(list(range(9)), num_replicas=2, batch_size=4, shuffle=False)
        s._s.set_position(0, 8)
        s._bind(1, 2)
        self.assertEqual(len(list(s)), 1)
        self.assertEqual(s.weight(1, 2), 0.0)

    def test_epoch_batches_helpers_and_misuse(self):
        s = aryl.ElasticSampler(100, 32, seed=1)
        self.assertEqual(s.global_batch(), 32)
        self.assertEqual(s.steps_per_epoch(), 4)  # 32, 32, 32, 4
        self.assertEqual(s.steps_left_in_epoch(4), 4)
        lin = aryl.ElasticSampler(100, 8, seed=1, linear_scaling=True)
        self.assertEqual(lin.global_batch(4), 32)  # per-device 8 at 4 ranks
        batches = s.epoch_batches()
        self.assertEqual(len(batches), 4)
        with self.assertRaisesRegex(RuntimeError, "once before the loop"):
            next(iter(batches))
        s._bind(0, 1)  # as Runtime.step() does
        it = iter(batches)
        self.assertEqual(len(next(it)), 32)
        with self.assertRaisesRegex(RuntimeError, "no Runtime.step"):
            next(it)

    def test_like_distributed_sampler_gives_each_rank_its_dataloader_batches(self):
        # (dataset, per-rank batch, world): divisible; last step short; DistributedSampler padding.
        for n, b, world in ((96, 5, 4), (64, 8, 2), (50, 4, 4)):
            ds = list(range(n))
            s = aryl.ElasticSampler.like_distributed_sampler(n, b, world, seed=3)
            self.assertEqual(s.global_batch(), b * world)
            for epoch in (0, 1):
                theirs = []
                for r in range(world):
                    d = torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=r, shuffle=True, seed=3)
                    d.set_epoch(epoch)
                    theirs.append([x.tolist() for x in torch.utils.data.DataLoader(ds, batch_size=b, sampler=d)])
                steps = len(theirs[0])
                for k in range(steps):
                    s._s.set_position(epoch, k * b * world)
                    for r in range(world):
                        ours, want = s.local(r, world), theirs[r][k]
                        if k == steps - 1 and n % world and r >= n % world:
                            want = want[:-1]  # DistributedSampler's padding repeats a sample; taken once here
                        self.assertEqual(ours, want, f"n={n} world={world} epoch {epoch} step {k} rank {r}")
        # At another world the same global order: every sample once per epoch.
        s = aryl.ElasticSampler.like_distributed_sampler(96, 5, 4, seed=3)
        seen = []
        for k in range(0, 96, 20):
            s._s.set_position(0, k)
            for r in range(3):
                seen += s.local(r, 3)
        self.assertEqual(sorted(seen), list(range(96)))
        with self.assertRaisesRegex(ValueError, "entry 1 is 0 again"):
            aryl.ElasticSampler(3, 2, order=lambda epoch: [0, 0, 1]).local(0, 1)

    def test_module_mismatch_is_reported(self):
        data = aryl.ElasticState(model=torch.nn.Linear(4, 3)).serialize()
        with self.assertRaisesRegex(RuntimeError, r"module Linear differs from the sender's: .*weight"):
            aryl.ElasticState(model=torch.nn.Linear(5, 3)).deserialize(data)

    def test_random_state_continues_after_restore(self):
        state = aryl.ElasticState(random_state=True)
        torch.manual_seed(3)
        torch.rand(10)
        data = state.serialize()
        expected = torch.rand(100)
        torch.manual_seed(99)
        state.deserialize(data)
        self.assertTrue(torch.equal(torch.rand(100), expected))

    def test_sample_dropout_masks_do_not_depend_on_the_world(self):
        # The rows of every rank's masks are the rows of the global batch's masks.
        sampler = aryl.ElasticSampler(50, 12, seed=3)
        drop = aryl.SampleDropout(0.4, salt=5)
        x = torch.ones(12, 16)
        whole = sampler.local_batch(0, 1)
        with aryl.sample_keys(whole.random_keys):
            reference = drop(x)
        self.assertAlmostEqual((reference == 0).float().mean().item(), 0.4, delta=0.15)
        for world in (2, 3, 4):
            parts = []
            for rank in range(world):
                local = sampler.local_batch(rank, world)
                with aryl.sample_keys(local.random_keys):
                    parts.append(drop(x[:len(local.indices)]))
            self.assertTrue(torch.equal(torch.cat(parts), reference), f"world {world}")
        with self.assertRaisesRegex(RuntimeError, "sample_keys"):
            drop(x)
        drop.eval()
        self.assertIs(drop(x), x)

    def test_sampler_is_a_batch_sampler(self):
        sampler = aryl.ElasticSampler(10, 4, seed=1, shuffle=False)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(10)), batch_sampler=sampler)
        sampler._bind(1, 2)
        self.assertEqual([b[0].tolist() for b in loader], [[2, 3]])
        self.assertEqual(sampler.local(0, 3), [0, 1])
        self.assertEqual(sampler.local_batch(2, 3).weight, 0.25)
        self.assertFalse(sampler.local_batch(0, 1).last_in_epoch)

    def test_step_without_all_reduce_is_an_error(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARYL_")}
        code = ("import aryl, torch\n"
                "m = torch.nn.Linear(2, 1); rt = aryl.Runtime.from_env(); st = aryl.ElasticState(model=m)\n"
                "assert rt.step(st)\n"
                "print(rt.step(st), rt.exit_code, rt.status)\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertIn("False 1 FailedPrecondition: Step() called without AllReduceGradients()", out.stdout,
                      out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
