#!/usr/bin/python3
"""bench_restart.py: the pause of a resize, restart-style against in place, under
aryl-run --standalone (embedded scheduler, a training agent with 2 slots and an
inference agent whose 2 slots are lent with `aryl pool offer` and taken back with
`aryl pool reclaim`), 2 -> 4 -> 2 workers, alternating the two kinds run by run:

  restart   examples/python/torchrun_ddp.py (plain torch.distributed + DDP, its own
            checkpoint; --elastic restart): every worker is stopped and the group
            starts again at the new size
  inplace   examples/python/elastic_mlp.py (the aryl Python API; detected in place)
            with a model of the same size (16 -> 32 -> 4)

Pause = rank 0's gap between its last step at the old size and its first step at the
new one (from the scripts' own step logs with wall times). Every run must exit 0 and
go through both changes.

  cmake --build build --target aryl-run aryl aryl_python
  /usr/bin/python3 bench/runtime/bench_restart.py --rounds 2
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = "/usr/bin/python3"
ARYL_RUN = os.path.join(ROOT, "build/cli/aryl-run")
ARYL = os.path.join(ROOT, "build/cli/aryl")
# Workers run in their own --cwd: the module path must be absolute.
ENV = dict(os.environ, ARYL_CONFIG="/dev/null", PYTHONPATH=os.path.join(ROOT, "build/python"))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def wait(what, cond, proc, err, deadline_s=300):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        if proc.poll() is not None:
            raise SystemExit(f"{what}: aryl-run exited {proc.returncode}\n{read(err)[-3000:]}")
        time.sleep(0.2)
    raise SystemExit(f"{what}: not within {deadline_s} s\n{read(err)[-3000:]}")


def one_run(kind, tmp):
    cwd = os.path.join(tmp, kind)
    os.makedirs(cwd)
    work = os.path.join(tmp, kind + "-aryl")
    if kind == "restart":
        prog = [PY, os.path.join(ROOT, "examples/python/torchrun_ddp.py"), "--steps", "200", "--sleep-ms", "40"]
        flags = ["--elastic", "restart"]
    else:
        prog = [PY, os.path.join(ROOT, "examples/python/elastic_mlp.py"), "--steps", "200", "--sleep-ms", "40",
                "--log-every", "1", "--features", "16", "--hidden", "32", "--layers", "1", "--classes", "4",
                "--global-batch", "24", "--dataset", "240"]
        flags = []
    err = os.path.join(tmp, kind + ".err")
    with open(err, "w") as e, open(os.devnull, "w") as out:
        proc = subprocess.Popen([ARYL_RUN, "--standalone", "--nproc-per-node", "2", "--nnodes", "1:2", "--slots", "2",
                                 "--loan-slots", "2", "--work-dir", work, "--cwd", cwd] + flags + ["--"] + prog,
                                stdout=out, stderr=e, env=ENV)

    def steps():
        """[(step, world, unix time)] of rank 0, in order."""
        if kind == "restart":
            return [(int(s), int(w), float(t)) for s, w, t in (l.split() for l in read(os.path.join(cwd, "steps.log"))
                                                              .splitlines())]
        rows = []
        for f in sorted(os.listdir(os.path.join(work, "logs", "job-1")) if os.path.isdir(
                os.path.join(work, "logs", "job-1")) else []):
            if f.endswith(".out"):
                rows += [(int(m[1]), int(m[2]), float(m[3])) for m in re.finditer(
                    r"^step=(\d+) .*?world=(\d+) .*?unix=([\d.]+)", read(os.path.join(work, "logs", "job-1", f)), re.M)]
        return sorted(set(rows), key=lambda r: r[2])

    def at(world, n):
        def check():
            s = steps()
            return s and s[-1][1] == world and sum(1 for r in s if r[1] == world and r[2] >= s[0][2]) >= n and s
        return check

    try:
        endpoint = wait("scheduler", lambda: (re.search(r"standalone scheduler on (\S+),", read(err)) or [None, None])[1],
                        proc, err)
        wait("20 steps at 2", at(2, 20), proc, err)
        subprocess.run([ARYL, "pool", "offer", "loan", "--scheduler", endpoint], check=True, env=ENV,
                       capture_output=True, timeout=60)
        wait("20 steps at 4", lambda: (lambda s: s and s[-1][1] == 4 and
                                       sum(1 for r in s if r[1] == 4) >= 20)(steps()), proc, err)
        subprocess.run([ARYL, "pool", "reclaim", "--servers", "loan", "--scheduler", endpoint], check=True, env=ENV,
                       capture_output=True, timeout=60)
        if proc.wait(timeout=300) != 0:
            raise SystemExit(f"{kind}: aryl-run exited {proc.returncode}\n{read(err)[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    s = steps()
    gaps = [(a[1], b[1], b[2] - a[2]) for a, b in zip(s, s[1:]) if a[1] != b[1]]
    if [(f, t) for f, t, _ in gaps] != [(2, 4), (4, 2)]:
        raise SystemExit(f"{kind}: changes {gaps}, expected 2->4 then 4->2")
    return [g for _, _, g in gaps]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the runs' directories (logs) and print them")
    args = ap.parse_args()
    results = {"restart": [], "inplace": []}
    for _ in range(args.rounds):
        for kind in ("restart", "inplace"):
            tmp = tempfile.mkdtemp(prefix="aryl_bench_restart_")
            try:
                results[kind].append(one_run(kind, tmp))
            finally:
                if args.keep:
                    print(f"{kind}: {tmp}")
                else:
                    shutil.rmtree(tmp, ignore_errors=True)
    print("| change | restart pause (s) | in-place pause (s) | rounds |")
    print("|---|---|---|---|")
    for i, change in enumerate(("2→4", "4→2")):
        r = [x[i] for x in results["restart"]]
        p = [x[i] for x in results["inplace"]]
        print(f"| {change} | {statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f}) | "
              f"{statistics.median(p):.3f} ({min(p):.3f}–{max(p):.3f}) | {args.rounds} |")


if __name__ == "__main__":
    sys.exit(main())
