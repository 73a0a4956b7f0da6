#!/usr/bin/python3
"""mnist_cnn.py: an MNIST-shaped CNN (1x28x28 inputs, 10 classes, dropout) on
synthetic digit-like data, trained with the aryl Python API through a
torch.utils.data.DataLoader whose batch sampler is the aryl.ElasticSampler.
SGD with momentum; the momentum buffers and the CPU generator move with the
state. Dropout is aryl.SampleDropout: each sample's mask comes from its key in
the sampler, so a resize does not change it.

    PYTHONPATH=build/python build/runtime/aryl-rt-launch --workers 2 --schedule 40:3 -- \\
        /usr/bin/python3 examples/python/mnist_cnn.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F

import aryl
from progress import ProgressPrinter


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 5)
        self.conv2 = torch.nn.Conv2d(16, 32, 5)
        self.drop = aryl.SampleDropout(0.25, salt=1)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


def synthetic_digits(n):
    """Each class is a fixed random 28x28 pattern plus noise (as examples/mnist_cnn)."""
    g = torch.Generator().manual_seed(7)
    patterns = torch.randn(10, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return patterns[labels] + 0.8 * torch.randn(n, 1, 28, 28, generator=g), labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--dataset", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    images, labels = synthetic_digits(args.dataset)
    dataset = torch.utils.data.TensorDataset(images, labels)
    torch.manual_seed(1)
    model = Cnn()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = aryl.ElasticSampler(len(dataset), args.global_batch, seed=1)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)  # one batch per step
    epochs = {"finished": 0}
    state = aryl.ElasticState(model=model, optimizer=opt, sampler=sampler, values=epochs, random_state=True)

    rt = aryl.Runtime.from_env()
    progress = ProgressPrinter(args.log_every)
    while rt.step(state) and state.step < args.steps:
        batch = sampler.local_batch(rt.rank, rt.world_size)
        opt.zero_grad()
        for x, y in loader:  # this rank's share of the step's global batch
            with aryl.sample_keys(batch.random_keys):  # the same samples, in the same order
                loss = F.cross_entropy(model(x), y)
            loss.backward()
        if not rt.all_reduce_gradients(model):  # weighted by this rank's share
            continue
        opt.step()
        if batch.last_in_epoch:
            epochs["finished"] += 1
        if rt.rank == 0:
            progress.step(state.step + 1, loss.item(), rt.world_size, rt.generation, batch.global_size)
    if rt.ok and rt.rank == 0:
        print(f"done steps={state.step} world={rt.world_size} epochs={epochs['finished']}", flush=True)
    raise SystemExit(rt.exit_code)


if __name__ == "__main__":
    main()
