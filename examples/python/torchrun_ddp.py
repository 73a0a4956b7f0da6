"""A training script written for torchrun (no aryl import) that survives restarts
the torchrun way: rank 0 saves model, optimizer and step to --checkpoint (in the
working directory) every --checkpoint-every steps; every start resumes from it.
Each step trains on the same global batch whatever the world size (an equal
shard per rank; DDP averages the gradients), so a run restarted at other sizes
ends with the parameters of a fixed-size run. The labels come from a fixed
linear teacher, so there is something to learn: the loss falls from about
1.3 to about 0.15 over the 200 default steps.

A stop (a preemption, a reclaim, a restart to resize) sends SIGTERM and, under
aryl, writes the file $ARYL_STOP_NOTICE names with the deadline (its SIGKILL):
the script finishes its step, the ranks agree to stop at the same step, rank 0
checkpoints there and every rank then ends by the SIGTERM it got. Nothing of
the steps since the last periodic checkpoint is lost. Under torchrun, which
sends only the SIGTERM, the same happens.

Rank 0 appends one line per start to starts.log (TORCHELASTIC_RESTART_COUNT,
WORLD_SIZE, the step it resumed from) and one per step to steps.log (step,
world size, time, loss), keeps progress.txt at the newest step, and saves the final
parameters to final.pt."""
import argparse
import json
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--checkpoint", default="checkpoint.pt")
parser.add_argument("--checkpoint-every", type=int, default=5)
parser.add_argument("--global-batch", type=int, default=24)
parser.add_argument("--sleep-ms", type=float, default=0)
args = parser.parse_args()


def write_atomically(path, save):
    tmp = path + ".tmp"
    save(tmp)
    os.replace(tmp, path)


stop_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    stop_requested = True


signal.signal(signal.SIGTERM, on_sigterm)


def stop_deadline():
    """The SIGKILL deadline (unix seconds) from aryl's stop notice, or None."""
    try:
        with open(os.environ["ARYL_STOP_NOTICE"]) as f:
            return json.load(f)["deadline"]
    except (KeyError, OSError, ValueError):
        return None


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert args.global_batch % world == 0, f"global batch {args.global_batch} does not split over {world} ranks"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
start = 0
if os.path.exists(args.checkpoint):
    state = torch.load(args.checkpoint)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    start = state["step"]
ddp = torch.nn.parallel.DistributedDataParallel(model)
if rank == 0:
    with open("starts.log", "a") as f:
        f.write(f"restart_count={os.environ['TORCHELASTIC_RESTART_COUNT']} world={world} step={start} "
                f"pid={os.getpid()} time={time.time():.3f} marker={os.environ.get('DDP_MARKER', '')}\n")
shard = args.global_batch // world
teacher = torch.randn(16, 4, generator=torch.Generator().manual_seed(7))  # what the labels follow
for step in range(start, args.steps):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(args.global_batch, 16, generator=g)
    y = (x @ teacher).argmax(1)
    opt.zero_grad()
    loss = F.cross_entropy(ddp(x[rank * shard:(rank + 1) * shard]), y[rank * shard:(rank + 1) * shard])
    loss.backward()
    opt.step()
    done = step + 1
    if rank == 0:
        print(f"step={done} loss={loss.item():.4f} world={world}", flush=True)
        if done % args.checkpoint_every == 0 or done == args.steps:
            write_atomically(args.checkpoint, lambda p: torch.save(
                {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": done}, p))
        write_atomically("progress.txt", lambda p: open(p, "w").write(f"{done} {world} {time.time():.3f}\n"))
        with open("steps.log", "a") as f:
            f.write(f"{done} {world} {time.time():.3f} {loss.item():.5f}\n")
    # Stop together: any rank told to stop stops every rank after this step.
    flag = torch.tensor([1 if stop_requested else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item():
        if rank == 0:
            deadline = stop_deadline()
            left = f"{deadline - time.time():.1f} s before SIGKILL" if deadline else "no notice file"
            if done % args.checkpoint_every and done != args.steps:
                write_atomically(args.checkpoint, lambda p: torch.save(
                    {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": done}, p))
            print(f"stop requested: checkpointed step {done} ({left})", flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # end as the stop asked, now that the step is saved
    if args.sleep_ms:
        time.sleep(args.sleep_ms / 1000)
if rank == 0:
    torch.save([p.detach().clone() for p in model.parameters()], "final.pt")
dist.destroy_process_group()
