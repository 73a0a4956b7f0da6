"""Capacity loaning with real traffic (./dev traffic): the serving side drained,
lent, reclaimed and ready again while requests flow and a job trains.

On this one machine: aryl-scheduler whose inference demand is a real Prometheus
query of the model servers' request rate; three inference agents, each running
examples/serving/model_server.py as its serving side (drain, stop, start, ready);
a training agent; an elastic job (examples/elastic_mlp, in-place resizes) that
trains throughout; and a load generator: an open-loop HTTP client at a chosen
rate that sends each request to the next server whose /ready says 200 (health
checks every 0.25 s, as a load balancer's). The rate goes low -> high -> low.

It prints (and writes to --out, JSON) the requests sent and failed, p50/p99
latency overall and during each reclaim (from the reclaim to its server serving
again), each reclaim's time to ready against its deadline, and the job's steps
and resizes (in place: no step is redone; a restart would be counted).

    python3 bench/serving/traffic.py --build build [--low 30 --high 120 --phase 45]
"""
import argparse
import http.client
import json
import math
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=1.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        return r.status, body
    finally:
        c.close()


class Load:
    """Open-loop requests at a rate that follows `phases` [(rate, seconds)]."""

    def __init__(self, ports, phases, workers=24):
        self.ports, self.phases = ports, phases
        self.ready = []  # ports whose /ready answered 200 at the last check
        self.lock = threading.Lock()
        self.results = []  # (sent, latency, ok, port, why)
        self.todo = queue.Queue()
        self.stop = threading.Event()
        self.next = 0
        self.threads = [threading.Thread(target=self.health, daemon=True)]
        self.threads += [threading.Thread(target=self.worker, daemon=True) for _ in range(workers)]

    def health(self):
        while not self.stop.is_set():
            up = []
            for p in self.ports:
                try:
                    if get(p, "/ready", 0.5)[0] == 200:
                        up.append(p)
                except OSError:
                    pass
            with self.lock:
                self.ready = up
            self.stop.wait(0.25)

    def pick(self):
        with self.lock:
            if not self.ready:
                return None
            self.next += 1
            return self.ready[self.next % len(self.ready)]

    def worker(self):
        while True:
            sent = self.todo.get()
            if sent is None:
                return
            port = self.pick()
            t0 = time.time()
            if port is None:
                self.record(sent, time.time() - sent, False, 0, "no server ready")
                continue
            try:
                status, _ = get(port, "/v1/predict", 2.0)
                self.record(sent, time.time() - sent, status == 200, port, "" if status == 200 else f"HTTP {status}")
            except OSError as e:
                self.record(sent, time.time() - t0, False, port, type(e).__name__)

    def record(self, *row):
        with self.lock:
            self.results.append(row)

    def run(self):
        for t in self.threads:
            t.start()
        time.sleep(0.5)
        start = time.time()
        for rate, seconds in self.phases:
            end = time.time() + seconds
            gap = 1.0 / rate
            due = time.time()
            while due < end:
                now = time.time()
                if due > now:
                    time.sleep(due - now)
                self.todo.put(due)
                due += gap
            print(f"traffic: {rate} req/s for {seconds} s done", flush=True)
        for _ in self.threads[1:]:
            self.todo.put(None)
        for t in self.threads[1:]:
            t.join(timeout=10)
        self.stop.set()
        return start


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q * len(xs))) - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--low", type=float, default=30, help="requests per second, low phases")
    ap.add_argument("--high", type=float, default=120, help="requests per second, the high phase")
    ap.add_argument("--phase", type=float, default=45, help="seconds per phase")
    ap.add_argument("--per-server", type=float, default=50, help="requests per second one server carries")
    ap.add_argument("--deadline", type=float, default=30, help="reclaim deadline (s)")
    ap.add_argument("--load-seconds", type=float, default=3, help="model load time added to importing torch")
    ap.add_argument("--out", default="traffic.json")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    b = os.path.abspath(args.build)
    bins = {k: os.path.join(b, v) for k, v in {"sched": "scheduler/aryl-scheduler", "agent": "agent/aryl-agent",
                                                "aryl": "cli/aryl", "mlp": "examples/elastic_mlp"}.items()}
    for k, v in bins.items():
        if not os.access(v, os.X_OK):
            sys.exit(f"traffic: {v} is missing; run ./dev build first")
    prom_bin = shutil.which("prometheus")
    if not prom_bin:
        sys.exit("traffic: prometheus is not installed (Debian package prometheus; ./dev installs it)")
    work = tempfile.mkdtemp(prefix="aryl-traffic-")
    procs = []

    def spawn(name, argv):
        log = open(os.path.join(work, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
        procs.append(p)
        return p

    server = os.path.join(ROOT, "examples/serving/model_server.py")
    serve_ports = [free_port() for _ in range(3)]
    prom, ep_port, http_port = free_port(), free_port(), free_port()
    ep = f"tcp://127.0.0.1:{ep_port}"
    try:
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: model\n    static_configs:\n"
                    f"      - targets: [{', '.join(repr(f'127.0.0.1:{p}') for p in serve_ports)}]\n")
        spawn("prometheus", [prom_bin, f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/tsdb",
                             f"--web.listen-address=127.0.0.1:{prom}", "--log.level=warn"])
        query = "sum(rate(model_requests_total[5s]))"
        spawn("scheduler", [bins["sched"], "--endpoint", ep, "--insecure", "--state", f"{work}/state.db",
                            "--http-port", str(http_port), "--heartbeat", "0.2", "--agent-timeout", "3",
                            "--inference-demand", f"prometheus:http://127.0.0.1:{prom}?query={query}",
                            "--demand-step", "1", "--demand-per-server", str(args.per_server),
                            "--demand-headroom", "1", "--demand-hysteresis", "0.2", "--demand-hold", "10",
                            "--demand-reclaim-deadline", str(args.deadline), "--serving-warmup", "10",
                            "--resize-dwell", "2"])
        time.sleep(1)
        spawn("agent-train", [bins["agent"], "--scheduler", ep, "--id", "train", "--host", "127.0.0.1",
                              "--pool", "training", "--slots", "2", "--gpu-type", "cpu", "--log-dir", f"{work}/logs"])
        for i, port in enumerate(serve_ports, 1):
            url = f"http://127.0.0.1:{port}"
            spawn(f"agent-inf-{i}", [
                bins["agent"], "--scheduler", ep, "--id", f"inf-{i}", "--host", "127.0.0.1", "--pool", "inference",
                "--slots", "1", "--gpu-type", "cpu", "--log-dir", f"{work}/logs-inf-{i}",
                "--serving-start", f"exec {PYTHON} {server} --port {port} --load-seconds {args.load_seconds}",
                "--serving-ready", url + "/ready", "--serving-drain", f"{PYTHON} {server} --drain {url}",
                "--serving-start-timeout", "120"])

        def aryl(*a):
            r = subprocess.run([bins["aryl"], *a, "--scheduler", ep, "-o", "json"], capture_output=True, text=True,
                               timeout=30, env=dict(os.environ, ARYL_CONFIG="/dev/null"))
            if r.returncode != 0:
                raise RuntimeError(f"aryl {' '.join(a)}: {r.stderr}")
            return json.loads(r.stdout) if r.stdout.strip() else {}

        deadline = time.time() + 90
        while time.time() < deadline:
            up = sum(1 for p in serve_ports if _ready(p))
            if up == 3:
                break
            time.sleep(0.5)
        else:
            sys.exit("traffic: the serving sides did not become ready in 90 s; see " + work)
        print(f"traffic: 3 serving sides ready; work dir {work}", flush=True)
        job = subprocess.run([bins["aryl"], "submit", "--scheduler", ep, "--name", "mlp", "--min", "1", "--max",
                              "5", "--", bins["mlp"], "--steps", "10000000", "--hidden", "256", "--log-every", "500"],
                             capture_output=True, text=True, timeout=30,
                             env=dict(os.environ, ARYL_CONFIG="/dev/null"))
        if job.returncode != 0:
            sys.exit("traffic: submit: " + job.stderr)
        job_id = job.stdout.strip().split()[-1]
        time.sleep(5)
        phases = [(args.low, args.phase), (args.high, args.phase), (args.low, args.phase)]
        load = Load(serve_ports, phases)
        t0 = load.run()
        t1 = time.time()
        time.sleep(2)
        events = aryl("events")["events"]
        desc = aryl("describe", "job", job_id)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)

    res = load.results
    ok = [r for r in res if r[2]]
    failed = [r for r in res if not r[2]]
    # Each reclaim: from its row to the row that says its server serves again.
    reclaims = []
    for e in events:
        if e["kind"] == "reclaim" and e["time"] >= t0 - 5:
            reclaims.append({"asked": e["time"], "nodes": e["nodes"], "deadline_s": e["data"].get("deadline_seconds"),
                             "warmup_s": e["data"].get("warmup_seconds")})
    for r in reclaims:
        done = [e for e in events if e["kind"] == "reclaimed" and "warmup_seconds" in e["data"] and
                e["time"] >= r["asked"]]
        if done:
            r["ready_after_s"] = round(done[0]["time"] - r["asked"], 2)
            r["late"] = bool(done[0]["data"].get("late"))
            r["node"] = done[0]["nodes"][0] if done[0]["nodes"] else ""
            window = [x for x in res if r["asked"] <= x[0] <= done[0]["time"]]
            lat = [x[1] for x in window if x[2]]
            r["requests"] = len(window)
            r["failed"] = sum(1 for x in window if not x[2])
            r["p50_ms"] = round(1000 * pct(lat, 0.5), 1)
            r["p99_ms"] = round(1000 * pct(lat, 0.99), 1)
    loans = [e for e in events if e["kind"] == "loan" and e["time"] >= t0 - 5]
    rescales = desc.get("rescales", [])
    summary = {
        "phases": phases, "per_server": args.per_server, "deadline_s": args.deadline,
        "requests": len(res), "failed": len(failed),
        "failures": sorted({r[4] for r in failed}),
        "p50_ms": round(1000 * pct([r[1] for r in ok], 0.5), 1),
        "p99_ms": round(1000 * pct([r[1] for r in ok], 0.99), 1),
        "loans": len(loans), "reclaims": reclaims,
        "job": {"step": desc["row"]["step"], "resizes": len(rescales),
                "restarts": sum(1 for x in rescales if x.get("kind") == "restart"),
                "in_place": sum(1 for x in rescales if x.get("kind") == "in_place")},
        "seconds": round(t1 - t0, 1), "work_dir": work if args.keep else "",
    }
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def _ready(port):
    try:
        return get(port, "/ready", 0.5)[0] == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
