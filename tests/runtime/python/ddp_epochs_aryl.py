"""ddp_epochs.py ported to aryl: resizable while it trains (elastic_py_test.py, DdpPort).
The imports, the sampler's fixed order world and per-rank batch, DDP's optimizer and
loader, the epoch loop's start (a joiner resumes mid-run) and the snapshot's rank (ranks
move at a resize) changed; nothing else."""
import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from aryl import DistributedSampler
from aryl import DistributedDataParallel as DDP
from aryl import init_process_group, destroy_process_group


def dataset(n):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, 12, generator=g)
    y = (x[:, :3].sum(1) > 0).long() + 2 * (x[:, 3] > 0).long()
    return TensorDataset(torch.arange(n), x, y)


def main(args):
    init_process_group(backend="gloo")
    rank = int(os.environ["RANK"])
    data = dataset(args.samples)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=False,
                        sampler=DistributedSampler(data, num_replicas=2, batch_size=args.batch_size))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model = DDP(model, optimizer, loader)
    log = open(os.path.join(args.out, f"samples-{os.getpid()}.txt"), "a")
    for epoch in range(loader.sampler.epoch, args.epochs):
        loader.sampler.set_epoch(epoch)
        for idx, source, targets in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(source), targets)
            loss.backward()
            print(epoch, f"{loss.item():.6f}", *idx.tolist(), file=log, flush=True)
            optimizer.step()
            time.sleep(args.sleep_ms / 1000)
        if model.rank == 0:
            torch.save({"model": model.module.state_dict(), "epoch": epoch}, os.path.join(args.out, "snapshot.pt"))
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sleep-ms", type=int, default=0)
    parser.add_argument("--out", required=True)
    main(parser.parse_args())
