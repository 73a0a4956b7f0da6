"""A small model server for the serving side of a loaned inference server.

It is what `aryl-agent --serving-start` runs in the examples and tests
(docs/operations.md, "The serving side of a loan"): a real HTTP server with a
torch model, the endpoints a load balancer and Prometheus use, and a drain.

  GET  /v1/predict        one inference of a 16-in, 4-out MLP on a random input
  POST /v1/predict        the same on {"x": [16 numbers]}; answers {"y": [4 numbers]}
  GET  /ready             200 once the model is loaded and while not draining, else 503
  GET  /healthz           200 while the process runs
  GET  /metrics           Prometheus text: requests by code, a latency histogram, in-flight
  POST /drain             stop being ready, wait --drain-delay (the load balancer notices and
                          takes it out), then until no request is in flight (at most
                          --drain-seconds), then answer 200

--load-seconds adds to the real load time (import torch, build the model) to act
like a large model; SIGTERM stops taking connections and ends once in-flight
requests are done. `model_server.py --drain URL` is the drain hook: it POSTs
URL/drain and exits 0 on a 200, 1 otherwise.

    python3 model_server.py --port 8000 --load-seconds 20
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]


def drain(url, timeout):
    try:
        req = urllib.request.Request(url.rstrip("/") + "/drain", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return 0 if r.status == 200 else 1
    except Exception as e:  # noqa: BLE001 - any failure fails the hook
        print(f"drain {url}: {e}", file=sys.stderr)
        return 1


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.model = None
        self.torch = None
        self.draining = False
        self.in_flight = 0
        self.requests = {}  # code -> count
        self.latency = [0] * (len(BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0

    def observe(self, code, seconds):
        with self.lock:
            self.requests[code] = self.requests.get(code, 0) + 1
            i = next((k for k, b in enumerate(BUCKETS) if seconds <= b), len(BUCKETS))
            self.latency[i] += 1
            self.latency_sum += seconds
            self.latency_count += 1

    def metrics(self):
        with self.lock:
            lines = ["# HELP model_requests_total Predictions answered, by HTTP code",
                     "# TYPE model_requests_total counter"]
            for code in sorted(self.requests) or [200]:
                lines.append(f'model_requests_total{{code="{code}"}} {self.requests.get(code, 0)}')
            lines += ["# HELP model_request_seconds Time to answer a prediction",
                      "# TYPE model_request_seconds histogram"]
            total = 0
            for b, n in zip(BUCKETS, self.latency):
                total += n
                lines.append(f'model_request_seconds_bucket{{le="{b}"}} {total}')
            lines.append(f'model_request_seconds_bucket{{le="+Inf"}} {self.latency_count}')
            lines.append(f"model_request_seconds_sum {self.latency_sum:.6f}")
            lines.append(f"model_request_seconds_count {self.latency_count}")
            lines += ["# HELP model_in_flight Predictions being answered", "# TYPE model_in_flight gauge",
                      f"model_in_flight {self.in_flight}",
                      "# HELP model_ready 1 when ready for traffic", "# TYPE model_ready gauge",
                      f"model_ready {1 if self.model is not None and not self.draining else 0}"]
            return "\n".join(lines) + "\n"


def make_handler(state, args):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # quiet: one line per request would flood the log
            pass

        def reply(self, code, body, ctype="application/json"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def predict(self, x):
            t0 = time.monotonic()
            with state.lock:
                state.in_flight += 1
            try:
                if state.model is None:
                    self.reply(503, '{"error": "loading"}')
                    state.observe(503, time.monotonic() - t0)
                    return
                torch = state.torch
                with torch.no_grad():
                    y = state.model(torch.tensor([x], dtype=torch.float32))[0].tolist()
                self.reply(200, json.dumps({"y": y}))
                state.observe(200, time.monotonic() - t0)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/v1/predict":
                return self.predict([float(i % 7) / 7 for i in range(16)])
            if path == "/ready":
                ok = state.model is not None and not state.draining
                return self.reply(200 if ok else 503, '{"ready": %s}' % ("true" if ok else "false"))
            if path == "/healthz":
                return self.reply(200, '{"ok": true}')
            if path == "/metrics":
                return self.reply(200, state.metrics(), "text/plain; version=0.0.4")
            self.reply(404, '{"error": "not found"}')

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0") or 0)
            body = self.rfile.read(n) if n else b""
            path = self.path.split("?")[0]
            if path == "/v1/predict":
                try:
                    x = json.loads(body)["x"]
                    assert len(x) == 16
                except Exception:  # noqa: BLE001
                    return self.reply(400, '{"error": "expected {\\"x\\": [16 numbers]}"}')
                return self.predict(x)
            if path == "/drain":
                state.draining = True
                # Load balancers poll /ready: requests keep coming until they
                # notice (a deregistration delay, as AWS's target groups have).
                time.sleep(args.drain_delay)
                deadline = time.monotonic() + args.drain_seconds
                while state.in_flight > 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                return self.reply(200 if state.in_flight == 0 else 504, '{"drained": %s}' %
                                  ("true" if state.in_flight == 0 else "false"))
            self.reply(404, '{"error": "not found"}')

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--load-seconds", type=float, default=0, help="added to the real load time")
    parser.add_argument("--drain-seconds", type=float, default=30, help="the most a drain waits for in-flight requests")
    parser.add_argument("--drain-delay", type=float, default=1.0,
                        help="seconds a drain answers not-ready before it waits for in-flight requests")
    parser.add_argument("--drain", metavar="URL", help="be the drain hook: POST URL/drain and exit")
    args = parser.parse_args()
    if args.drain:
        sys.exit(drain(args.drain, args.drain_seconds + 5))
    t0 = time.monotonic()
    state = State()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state, args))
    server.daemon_threads = True
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()  # /healthz while loading

    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).eval()
    stopping.wait(max(0.0, args.load_seconds))
    if not stopping.is_set():
        state.torch = torch
        state.model = model
        print(f"model_server: ready on {args.host}:{args.port} after {time.monotonic() - t0:.1f} s", flush=True)
    while not stopping.wait(0.2):
        pass
    # SIGTERM: no new connections; the requests in flight end first.
    server.shutdown()
    deadline = time.monotonic() + args.drain_seconds
    while state.in_flight > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    server.server_close()
    print("model_server: stopped", flush=True)


if __name__ == "__main__":
    main()
