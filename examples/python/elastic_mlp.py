#!/usr/bin/python3
"""elastic_mlp.py: the MLP of examples/elastic_mlp (synthetic classification),
trained with the aryl Python API. Runs alone, at a fixed size
(ARYL_WORLD_SIZE/ARYL_RANK) or elastically under aryl-rt-launch / aryl-run.
Rank 0 prints the same progress lines as the C++ examples.

    PYTHONPATH=build/python build/runtime/aryl-rt-launch --workers 2 --schedule 50:4,100:3 -- \\
        /usr/bin/python3 examples/python/elastic_mlp.py --steps 300
"""
import argparse
import os
import time

import torch

import aryl
from progress import ProgressPrinter


def build_model(features, hidden, layers, classes, dropout=0.0):
    """With dropout > 0, an aryl.SampleDropout after each hidden layer (per-sample masks
    that a resize does not change; the forward pass runs inside aryl.sample_keys)."""
    body, width = [], features
    for i in range(layers):
        body += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        if dropout > 0:
            body.append(aryl.SampleDropout(dropout, salt=i + 1))
        width = hidden
    body.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*body)


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    return torch.optim.Adam(params, lr=lr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--dataset", type=int, default=8192)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--optimizer", choices=["adam", "adamw", "sgd"], default="adam")
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--dropout", type=float, default=0.0, help="aryl.SampleDropout after each hidden layer")
    ap.add_argument("--sleep-ms", type=int, default=0, help="per-step sleep (tests: keeps a run long enough)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda: ARYL_BACKEND=nccl)")
    ap.add_argument("--out", default="", help="rank 0 saves the final parameters here (torch.save)")
    ap.add_argument("--samples-dir", default="", help="each worker appends its committed samples here")
    ap.add_argument("--loop", choices=["steps", "epochs"], default="steps",
                    help="steps: one rt.step() per loop turn; epochs: a DataLoader over sampler.epoch_batches()")
    ap.add_argument("--exit-rank", type=int, default=-1,
                    help="tests: this rank raises SystemExit(0) at --exit-step (an early clean exit: a leave)")
    ap.add_argument("--exit-step", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    # A learnable task: labels from a fixed random linear teacher. Same on every worker.
    torch.manual_seed(args.seed)
    x = torch.randn(args.dataset, args.features)
    teacher = torch.randn(args.features, args.classes)
    y = torch.argmax(x @ teacher, 1)
    model = build_model(args.features, args.hidden, args.layers, args.classes, args.dropout)
    x, y, model = x.to(args.device), y.to(args.device), model.to(args.device)
    opt = make_optimizer(args.optimizer, model.parameters(), args.lr)
    sampler = aryl.ElasticSampler(args.dataset, args.global_batch, seed=args.seed)
    state = aryl.ElasticState(model=model, optimizer=opt, sampler=sampler)

    rt = aryl.Runtime.from_env()
    samples = None
    if args.samples_dir:
        samples = open(os.path.join(args.samples_dir, f"{rt.worker_id}.txt"), "a")
    progress = ProgressPrinter(args.log_every)
    loop = epoch_loop if args.loop == "epochs" else step_loop
    loop(args, rt, state, model, opt, sampler, x, y, lambda *a: committed(rt, state, samples, progress, *a))
    finish(args, rt, state, model)


def committed(rt, state, samples, progress, loss, epoch, indices, global_size):
    """After a step's optimizer update, before the rt.step() that commits it."""
    rt.report_loss(loss)
    if samples:
        samples.write(f"{state.step} {epoch} {os.getpid()} {' '.join(map(str, indices))}\n")
        samples.flush()
    if rt.rank == 0:
        progress.step(state.step + 1, loss, rt.world_size, rt.generation, global_size)


def step_loop(args, rt, state, model, opt, sampler, x, y, done):
    """One rt.step() per loop turn; the batch from sampler.local_batch()."""
    announced = False
    while rt.step(state) and state.step < args.steps:
        if not announced and rt.rank == 0:
            print(f"start worker={rt.worker_id} world={rt.world_size} gen={rt.generation} step={state.step}",
                  flush=True)
            announced = True
        if rt.rank == args.exit_rank and state.step == args.exit_step:
            print(f"leaving worker={rt.worker_id} rank={rt.rank} step={state.step}", flush=True)
            raise SystemExit(0)
        batch = sampler.local_batch(rt.rank, rt.world_size)
        idx = torch.tensor(batch.indices, dtype=torch.int64)
        opt.zero_grad()
        with aryl.sample_keys(batch.random_keys):
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        if not rt.all_reduce_gradients(model, batch.weight):
            continue  # a peer failed: step abandoned, replayed after recovery
        opt.step()
        done(loss.item(), batch.epoch, batch.indices, batch.global_size)


def epoch_loop(args, rt, state, model, opt, sampler, x, y, done):
    """The same training in the usual epoch shape: a DataLoader whose batch sampler yields this
    rank's share of each step, one rt.step() per batch."""
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_sampler=sampler.epoch_batches())
    ok = rt.step(state)  # joins the group or restores the state
    while ok and state.step < args.steps:
        for xb, yb in loader:
            indices, epoch = sampler.local(rt.rank, rt.world_size), sampler.epoch  # what this batch is
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)
            if rt.all_reduce_gradients(model):  # False: a peer failed, the step is replayed
                opt.step()
                done(loss.item(), epoch, indices, sampler.global_batch(rt.world_size))
            ok = rt.step(state)  # commits the step, applies resizes
            if not ok or state.step >= args.steps:
                break


def finish(args, rt, state, model):
    if rt.ok and state.step >= args.steps and rt.rank == 0:
        # params: the sum of |w|, to compare a run with a fixed-size one (as the C++ example does)
        params = sum(p.detach().abs().sum().item() for p in model.parameters())
        print(f"done steps={state.step} world={rt.world_size} resizes={len(rt.resizes)} params={params:.9e}",
              flush=True)
        if args.out:
            torch.save([p.detach().clone() for p in model.parameters()], args.out)
    raise SystemExit(rt.exit_code)


if __name__ == "__main__":
    main()
