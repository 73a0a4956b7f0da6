#!/usr/bin/python3
"""One worker of the Python steady-state comparison (bench/runtime/bench_python.py).

--mode aryl: the loop of examples/python/elastic_mlp.py (aryl.Runtime, launched by
aryl-rt-launch). --mode ddp: the same model, data and global batch with plain
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
    ap.add_argument("--mode", choices=["aryl", "ddp"], required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    n, classes = 4096, 8
    torch.manual_seed(1)
    x = torch.randn(n, args.features)
    y = torch.randint(0, classes, (n,))
    model = build_model(args.features, args.hidden, args.layers, classes)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []

    if args.mode == "aryl":
        import aryl
        rt = aryl.Runtime.from_env()
        sampler = aryl.ElasticSampler(n, args.global_batch, seed=1)
        state = aryl.ElasticState(model=model, optimizer=opt, sampler=sampler)
        t0 = None
        while rt.step(state) and state.step < args.steps:
            if t0 is not None:
                times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            batch = sampler.local_batch(rt.rank, rt.world_size)
            idx = torch.tensor(batch.indices)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            if not rt.all_reduce_gradients(model, batch.weight):
                continue
            opt.step()
        rank = rt.rank
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
        for step in range(args.steps):
            t0 = time.perf_counter()
            start = (step * args.global_batch) % n
            local = args.global_batch // world
            idx = perm[start + rank * local:start + (rank + 1) * local]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x[idx]), y[idx]).backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        dist.destroy_process_group()
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"result mode={args.mode} params={params} median_step_s={statistics.median(times[args.warmup:]):.6f}",
              flush=True)


if __name__ == "__main__":
    main()
