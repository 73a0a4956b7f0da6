#!/usr/bin/python3
"""bench_python.py: the Python API against its references, one table per mode.

  resize  the same MLP as examples/elastic_mlp (C++) and examples/python/elastic_mlp.py
          under aryl-rt-launch with one schedule (default 2->4->3->1->2), alternating
          C++ and Python runs; per change: pause seen by rank 0 (gap between its last
          step before and its first step after, minus the median step time at the new
          size) and the runtime's own boundary time (ResizeReport.total_s).
  steady  median step time of the Python API (aryl-rt-launch, 2 workers) against plain
          torch.distributed + DistributedDataParallel on Gloo with the same model, data
          and global batch (bench/runtime/python_step.py), alternating runs, per model size.

Every run is checked: it must exit 0 and apply every scheduled change.

  PYTHONPATH=build/python /usr/bin/python3 bench/runtime/bench_python.py resize --rounds 2
  PYTHONPATH=build/python /usr/bin/python3 bench/runtime/bench_python.py steady --rounds 3
  (steady --baseline OTHER_BUILD: each round also runs the aryl side with another build,
  e.g. one of an older commit, so both are measured under the same load)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = "/usr/bin/python3"


def run(cmd, env=None, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout + p.stderr


def pauses(output, schedule):
    """[(from, to, pause_s, boundary_s)] from rank 0's progress lines and resize reports."""
    steps = {}
    for m in re.finditer(r"^step=(\d+) .*? world=(\d+) .*?step_s=([\d.]+) .*?unix=([\d.]+)", output, re.M):
        steps[int(m[1])] = (int(m[2]), float(m[3]), float(m[4]))
    out = []
    reports = re.findall(r"^aryl: resize .*?from_world=(\d+) to_world=(\d+) step=(\d+) .*?total_s=([\d.]+)", output,
                         re.M)
    for frm, to, step, total in reports:
        s = int(step)
        if s not in steps or s + 1 not in steps:
            continue
        at_new = [st for w, st, _ in steps.values() if w == int(to)]
        gap = steps[s + 1][2] - steps[s][2]
        out.append((int(frm), int(to), max(0.0, gap - statistics.median(at_new)), float(total)))
    expected = len(schedule.split(","))
    if len(out) != expected:
        raise SystemExit(f"{len(out)} of {expected} changes measured:\n{output[-4000:]}")
    return out


def resize(args):
    launch = os.path.join(args.build, "runtime", "aryl-rt-launch")
    model = ["--steps", str(args.steps), "--features", str(args.features), "--hidden", str(args.hidden),
             "--layers", "2", "--global-batch", "64", "--dataset", "4096", "--log-every", "1"]
    programs = {"C++": [os.path.join(args.build, "examples", "elastic_mlp")],
                "Python": [PY, os.path.join(ROOT, "examples", "python", "elastic_mlp.py")]}
    results = {k: [] for k in programs}
    for r in range(args.rounds):
        for name, prog in programs.items():
            out = run([launch, "--workers", "2", "--schedule", args.schedule, "--"] + prog + model,
                      env={"PYTHONPATH": os.path.join(args.build, "python")})
            results[name].append(pauses(out, args.schedule))
            print(f"round {r} {name}: " + ", ".join(f"{a}->{b} {p:.3f}s" for a, b, p, _ in results[name][-1]),
                  flush=True)
    print(f"\nfeatures={args.features} hidden={args.hidden} schedule={args.schedule} rounds={args.rounds} "
          "(medians over rounds)")
    print(f"{'change':>8} {'C++ pause_s':>12} {'Py pause_s':>11} {'C++ boundary_s':>15} {'Py boundary_s':>14} "
          f"{'Py/C++ boundary':>16}")
    tot = {"C++": [0.0, 0.0], "Python": [0.0, 0.0]}
    for i, (frm, to, _, _) in enumerate(results["C++"][0]):
        row = {}
        for name in programs:
            row[name] = (statistics.median(r[i][2] for r in results[name]),
                         statistics.median(r[i][3] for r in results[name]))
            tot[name][0] += row[name][0]
            tot[name][1] += row[name][1]
        print(f"{f'{frm}->{to}':>8} {row['C++'][0]:12.3f} {row['Python'][0]:11.3f} {row['C++'][1]:15.4f} "
              f"{row['Python'][1]:14.4f} {row['Python'][1] / max(row['C++'][1], 1e-9):16.2f}")
    print(f"{'total':>8} {tot['C++'][0]:12.3f} {tot['Python'][0]:11.3f} {tot['C++'][1]:15.4f} "
          f"{tot['Python'][1]:14.4f} {tot['Python'][1] / max(tot['C++'][1], 1e-9):16.2f}")


def steady(args):
    launch = os.path.join(args.build, "runtime", "aryl-rt-launch")
    script = os.path.join(ROOT, "bench", "runtime", "python_step.py")
    env = {"PYTHONPATH": os.path.join(args.build, "python")}
    print(f"{'params':>10} {'rounds':>6} {'ddp_step_s':>11} {'aryl_step_s':>12} {'overhead':>9} "
          f"{'per-round overhead min..max':>28}")
    for size in args.sizes.split(","):
        features, hidden = map(int, size.split("x"))
        common = ["--steps", str(args.steps), "--features", str(features), "--hidden", str(hidden)]
        if args.phases:
            common.append("--phases")
        ddp, ar, base, params = [], [], [], 0
        for r in range(args.rounds):
            procs = [subprocess.Popen([PY, script, "--mode", "ddp"] + common, stdout=subprocess.PIPE, text=True,
                                      env=dict(os.environ, RANK=str(k), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                               MASTER_PORT=str(29700 + r), **env)) for k in range(2)]
            outs = [p.communicate(timeout=600)[0] for p in procs]
            if any(p.returncode for p in procs):
                raise SystemExit(f"ddp run failed:\n{outs}")
            m = re.search(r"params=(\d+) median_step_s=([\d.]+)", "".join(outs))
            params, t_ddp = int(m[1]), float(m[2])
            out = run([launch, "--workers", "2", "--", PY, script, "--mode", "aryl"] + common, env=env)
            t_aryl = float(re.search(r"median_step_s=([\d.]+)", out)[1])
            if args.baseline:  # the same aryl run with another build, right after
                b = args.baseline
                base_out = run([os.path.join(b, "runtime", "aryl-rt-launch"), "--workers", "2", "--", PY, script,
                                "--mode", "aryl"] + common, env={"PYTHONPATH": os.path.join(b, "python")})
                base.append(float(re.search(r"median_step_s=([\d.]+)", base_out)[1]))
            if args.phases:
                for mode, text in (("ddp", "".join(outs)), ("aryl", out)):
                    print(f"  round {r} {mode}: {re.search(r'^phases (.*)$', text, re.M)[1]}", flush=True)
            ddp.append(t_ddp)
            ar.append(t_aryl)
        d, a = statistics.median(ddp), statistics.median(ar)
        # Spread: the overhead of each round's pair of runs (they ran back to back).
        per_round = sorted(100 * (y - x) / x for x, y in zip(ddp, ar))
        print(f"{params:>10} {args.rounds:>6} {d:11.5f} {a:12.5f} {100 * (a - d) / d:+8.1f}% "
              f"{per_round[0]:+13.1f}% .. {per_round[-1]:+.1f}%", flush=True)
        if base:
            b = statistics.median(base)
            per_round = sorted(100 * (y - x) / x for x, y in zip(ddp, base))
            print(f"{'baseline':>10} {args.rounds:>6} {d:11.5f} {b:12.5f} {100 * (b - d) / d:+8.1f}% "
                  f"{per_round[0]:+13.1f}% .. {per_round[-1]:+.1f}%  ({args.baseline})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["resize", "steady"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--schedule", default="10:4,30:3,50:1,70:2")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--features", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--sizes", default="32x128,512x1024,1024x2048", help="FEATURESxHIDDEN,... (steady)")
    ap.add_argument("--phases", action="store_true", help="steady: per-round median time of each step phase")
    ap.add_argument("--baseline", default="", help="steady: also run the aryl side with this build dir each round")
    args = ap.parse_args()
    resize(args) if args.mode == "resize" else steady(args)


if __name__ == "__main__":
    sys.exit(main())
