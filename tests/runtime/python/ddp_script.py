"""A training script written for torchrun (no aryl import): torch.distributed's env://
initialisation from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, DistributedDataParallel on
Gloo. Each rank prints a checksum of its final parameters."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert int(os.environ["LOCAL_RANK"]) == rank and int(os.environ["LOCAL_WORLD_SIZE"]) == world
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    g = torch.Generator().manual_seed(step * 100 + rank)
    x = torch.randn(16, 8, generator=g)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
checksum = sum(p.double().sum().item() for p in model.parameters())
# One write per line: the ranks share the launcher's stdout.
sys.stdout.write(f"ddp rank={rank} world={world} run_id={os.environ['TORCHELASTIC_RUN_ID']} checksum={checksum:.10f}\n")
sys.stdout.flush()
dist.destroy_process_group()
