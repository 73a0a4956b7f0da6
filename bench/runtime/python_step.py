#!/usr/bin/python3
"""One worker of the Python steady-state comparison (bench/runtime/bench_python.py).

--mode aryl: the loop of examples/python/elastic_mlp.py (aryl.Runtime, launched by
aryl-rt-launch). --mode overhead: the runtime's own calls of one step alone (one
process, no launcher, so the all-reduce moves nothing): Runtime.step(), the sampler's
batch and all_reduce_gradients() on gradients computed once; the median cost of each. --mode ddp: the same model, data and global batch with plain
torch.distributed + DistributedDataParallel on Gloo (RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT set by the harness). Both take the same contiguous slice of each global
batch, so they do the same arithmetic; rank 0 prints the median step time.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from elastic_mlp import build_model  # noqa: E402  the same MLP as the example


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["aryl", "ddp", "overhead"], required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--phases", action="store_true", help="also print the median time of each phase of a step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    n, classes = 4096, 8
    torch.manual_seed(1)
    x = torch.randn(n, args.features)
    y = torch.randint(0, classes, (n,))
    model = build_model(args.features, args.hidden, args.layers, classes)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    phases = {}  # name -> [seconds per step]

    def mark(name, t):
        """Time since `t` charged to phase `name`; returns now."""
        now = time.perf_counter()
        if args.phases:
            phases.setdefault(name, []).append(now - t)
        return now

    if args.mode == "overhead":
        import aryl
        rt = aryl.Runtime.from_env()
        sampler = aryl.ElasticSampler(n, args.global_batch, seed=1)
        state = aryl.ElasticState(model=model, optimizer=opt, sampler=sampler)
        torch.nn.functional.cross_entropy(model(x[:8]), y[:8]).backward()
        cost = {"step": [], "batch": [], "all_reduce": []}
        t = time.perf_counter()
        while rt.step(state) and state.step < args.steps:
            t1 = time.perf_counter()
            batch = sampler.local_batch(rt.rank, rt.world_size)
            idx = torch.tensor(batch.indices)
            t2 = time.perf_counter()
            if not rt.all_reduce_gradients(model, batch.weight):
                raise SystemExit(f"all_reduce_gradients failed: {rt.status}")
            t3 = time.perf_counter()
            cost["batch"].append(t2 - t1)
            cost["all_reduce"].append(t3 - t2)
            if state.step > 0:
                cost["step"].append(t1 - t)
            t = t3
        params = sum(p.numel() for p in model.parameters())
        print(f"overhead params={params} steps={args.steps} " + " ".join(
            f"{k}_us={statistics.median(v[args.warmup:]) * 1e6:.1f}" for k, v in cost.items()) +
            f" total_us={sum(statistics.median(v[args.warmup:]) for v in cost.values()) * 1e6:.1f}", flush=True)
        return
    if args.mode == "aryl":
        import aryl
        rt = aryl.Runtime.from_env()
        sampler = aryl.ElasticSampler(n, args.global_batch, seed=1)
        state = aryl.ElasticState(model=model, optimizer=opt, sampler=sampler)
        t0 = t = None
        while rt.step(state) and state.step < args.steps:
            if t0 is not None:
                mark("step()", t)
                times.append(time.perf_counter() - t0)
            t0 = t = time.perf_counter()
            batch = sampler.local_batch(rt.rank, rt.world_size)
            idx = torch.tensor(batch.indices)
            t = mark("batch", t)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            t = mark("forward", t)
            loss.backward()
            t = mark("backward", t)
            if not rt.all_reduce_gradients(model, batch.weight):
                continue
            t = mark("all_reduce", t)
            opt.step()
            t = mark("optimizer", t)
        rank = rt.rank
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
        for step in range(args.steps):
            t0 = t = time.perf_counter()
            start = (step * args.global_batch) % n
            local = args.global_batch // world
            idx = perm[start + rank * local:start + (rank + 1) * local]
            t = mark("batch", t)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx])
            t = mark("forward", t)
            loss.backward()  # DDP all-reduces inside
            t = mark("backward", t)
            opt.step()
            mark("optimizer", t)
            times.append(time.perf_counter() - t0)
        dist.destroy_process_group()
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"result mode={args.mode} params={params} median_step_s={statistics.median(times[args.warmup:]):.6f}",
              flush=True)
        if args.phases:
            print("phases " + " ".join(f"{k}={statistics.median(v[args.warmup:]) * 1e6:.0f}us" for k, v in phases.items()),
                  flush=True)


if __name__ == "__main__":
    main()
