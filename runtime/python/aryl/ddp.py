"""torch.distributed's names over the aryl runtime: a DDP script is ported by its imports.

    from aryl import init_process_group, destroy_process_group, DistributedSampler
    from aryl import DistributedDataParallel as DDP

    init_process_group(backend="gloo")       # the runtime of the ARYL_* environment
    loader = DataLoader(dataset, batch_size=32,
                        sampler=DistributedSampler(dataset, num_replicas=2, batch_size=32))
    model = DDP(model, optimizer, loader)    # joins the group, or restores the state
    for epoch in range(loader.sampler.epoch, epochs):   # a joiner resumes mid-run
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()                 # all-reduce, step, commit; resizes happen here
        if model.rank == 0:                  # ranks move at a resize
            torch.save(model.module.state_dict(), path)
    destroy_process_group()

What differs from torch's, and why (docs/runtime.md, "From torchrun"):
 1. DistributedSampler takes the DataLoader's per-rank batch_size and a fixed
    num_replicas (the world whose order it reproduces: the same constant in
    every worker). At that world each rank gets, batch for batch, what torch's
    DistributedSampler gives it there; at any other world each rank still
    trains on batch_size samples a step (the global batch is batch_size x
    world, as under torchrun) and every sample is used once per epoch across
    resizes. Its position moves only when a step commits, so its epoch is the
    runtime's: set_epoch checks it rather than sets it.
 2. DistributedDataParallel takes the optimizer and the loader (or sampler)
    as well as the model: they make up the state that moves to joiners. It
    joins or restores at once, and wraps optimizer.step(): the gradients are
    all-reduced (scaled by this rank's share of the step), the inner step
    runs unless a peer failed (the step is then replayed by the survivors),
    and the step commits. A worker that a shrink removes, or that is told to
    stop, leaves from inside optimizer.step() with SystemExit(exit code).
 3. The DataLoader must run in the training process (num_workers=0) and keep
    its last short batch (drop_last=False): each batch is taken at the rank
    and world of the step it trains.
"""
import os

import torch

from . import ElasticSampler, ElasticState, Runtime, _distributed_order

__all__ = ["init_process_group", "destroy_process_group", "is_initialized", "get_rank", "get_world_size",
           "DistributedSampler", "DistributedDataParallel"]

_runtime = None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None):
    """Connects this worker's aryl runtime (Runtime.from_env()). The ARYL_* environment decides the
    membership, so world_size, rank, store and init_method must be left unset. backend ("gloo" or
    "nccl") is used when the launcher did not set ARYL_BACKEND; timeout is ARYL_COLLECTIVE_TIMEOUT_MS."""
    global _runtime
    if _runtime is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    given = {k: v for k, v in (("world_size", world_size), ("rank", rank)) if v != -1}
    given.update({k: v for k, v in (("init_method", init_method), ("store", store)) if v is not None})
    if given:
        raise ValueError(f"aryl.init_process_group: {', '.join(f'{k}={v!r}' for k, v in given.items())}: the "
                         "aryl launcher decides the members (ARYL_* environment); leave these unset")
    if backend is not None:
        backend = str(backend).lower()
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"aryl.init_process_group: backend={backend!r}: aryl runs gloo or nccl")
        os.environ.setdefault("ARYL_BACKEND", backend)
    if timeout is not None:
        os.environ.setdefault("ARYL_COLLECTIVE_TIMEOUT_MS", str(int(timeout.total_seconds() * 1000)))
    _runtime = Runtime.from_env()


def destroy_process_group(group=None):
    """Drops this worker's runtime (the steps were committed by optimizer.step())."""
    global _runtime
    _runtime = None


def is_initialized():
    return _runtime is not None


def get_rank(group=None):
    return _default_runtime().rank


def get_world_size(group=None):
    return _default_runtime().world_size


def _default_runtime():
    global _runtime
    if _runtime is None:
        _runtime = Runtime.from_env()
    return _runtime


class DistributedSampler(ElasticSampler):
    """torch.utils.data.DistributedSampler's order at num_replicas ranks, resizable.

    Pass it as DataLoader(dataset, batch_size=batch_size, sampler=...). Iterating yields this
    rank's indices for each step of the rest of the current epoch, a step's share at a time,
    each taken at the rank and world of the last Runtime.step(); len() is batch_size x the steps
    left, so len(loader) is the number of batches this epoch still has.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False, *,
                 batch_size=None):
        n = len(dataset) if hasattr(dataset, "__len__") else int(dataset)
        if num_replicas is None or batch_size is None:
            raise ValueError("aryl.DistributedSampler needs num_replicas (the world whose order it keeps, the "
                             "same constant in every worker) and batch_size (the DataLoader's, per rank)")
        if drop_last:
            raise ValueError("aryl.DistributedSampler: drop_last=True is not supported; every sample is used "
                             "once per epoch")
        world, b = int(num_replicas), int(batch_size)
        if n <= 0 or world <= 0 or b <= 0:
            raise ValueError(f"aryl.DistributedSampler: dataset size {n}, num_replicas={world} and "
                             f"batch_size={b} must be positive")
        super().__init__(n, b, seed=int(seed), linear_scaling=True, reference_world=world,
                         order=_distributed_order(n, b, world, int(seed), shuffle))
        self.batch_size = b
        self.num_replicas = world
        self._target = None  # the epoch of the last set_epoch()

    def set_epoch(self, epoch):
        """Checks that the loop is at the runtime's epoch (the position is restored with the state, so a
        joiner's loop starts at sampler.epoch). One ahead is accepted: the epoch's last step was replayed
        after a fault and is taken first."""
        epoch = int(epoch)
        if epoch not in (self.epoch, self.epoch + 1):
            raise ValueError(f"aryl.DistributedSampler.set_epoch({epoch}): the runtime is at epoch {self.epoch} "
                             f"(sample {self.cursor} of {self.dataset_size}); start the epoch loop at "
                             "sampler.epoch, which a joiner or a restore sets")
        self._target = epoch

    def __len__(self):
        return self.batch_size * self.steps_left_in_epoch()

    def __iter__(self):
        if self._binds == 0:
            raise RuntimeError("aryl.DistributedSampler: wrap the model in aryl.DistributedDataParallel (it joins "
                               "the group or restores the state) before iterating the loader")
        target = self.epoch if self._target is None or self._target < self.epoch else self._target
        seen = None
        while self.epoch <= target:
            if self._binds == seen:
                raise RuntimeError("aryl.DistributedSampler: the next batch was asked for before optimizer.step() "
                                   "committed this one (use num_workers=0 and drop_last=False)")
            seen = self._binds
            batch = self.local_batch(self._rank, self._world)
            indices = list(batch.indices)
            if not indices:
                # The epoch's last step has fewer samples than ranks: this rank trains on one sample with
                # weight 0 (as DistributedSampler pads), so it still joins the step's all-reduce.
                indices = self.local(0, self._world)[:1]
            yield from indices
            if batch.last_in_epoch and batch.epoch == target:
                return


class DistributedDataParallel(torch.nn.Module):
    """The model, trained by the aryl runtime: DDP's place in a script (see the module's docs).

    module: the model; optimizer: its optimizer (its step() is wrapped); data: the DataLoader over an
    aryl.DistributedSampler, or the sampler. values, random_state: as for ElasticState. device_ids and
    DDP's other options are accepted and unused (the runtime buckets and all-reduces the gradients).
    """

    def __init__(self, module, optimizer, data, device_ids=None, output_device=None, values=None,
                 random_state=False, **ddp_options):
        super().__init__()
        sampler = data.sampler if isinstance(data, torch.utils.data.DataLoader) else data
        if not isinstance(sampler, DistributedSampler):
            raise TypeError(f"aryl.DistributedDataParallel: data's sampler is a {type(sampler).__name__}, not an "
                            "aryl.DistributedSampler")
        if isinstance(data, torch.utils.data.DataLoader):
            if data.batch_size != sampler.batch_size:
                raise ValueError(f"aryl.DistributedDataParallel: the DataLoader's batch_size={data.batch_size} "
                                 f"differs from its sampler's batch_size={sampler.batch_size}")
            if data.num_workers != 0 or data.drop_last:
                raise ValueError(f"aryl.DistributedDataParallel: DataLoader(num_workers={data.num_workers}, "
                                 f"drop_last={data.drop_last}): use num_workers=0 and drop_last=False (each "
                                 "batch is taken at the world of its step)")
        self.module = module
        self.sampler = sampler
        self.runtime = _default_runtime()
        self.state = ElasticState(model=module, optimizer=optimizer, sampler=sampler, values=values,
                                  random_state=random_state)
        inner = optimizer.step
        rt, state = self.runtime, self.state

        def step(closure=None):
            loss = None
            if rt.all_reduce_gradients(module):
                loss = inner() if closure is None else inner(closure)
            if not rt.step(state):
                raise SystemExit(rt.exit_code)
            return loss

        optimizer.step = step
        if not rt.step(state):
            raise SystemExit(rt.exit_code)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @property
    def rank(self):
        return self.runtime.rank

    @property
    def world_size(self):
        return self.runtime.world_size
