"""aryl: elastic data-parallel training for PyTorch.

A loop written as for torch.distributed, whose worker count can change while
it trains: workers that stay keep their process and state, joiners receive
the state from a stayer, no committed step is lost, and every sample of an
epoch is used exactly once. It runs over the same C++ runtime as C++ programs
(aryl_runtime): the gradient all-reduce, the state transfer, the rendezvous
and the communicator rebuild are C++; no collective runs in Python.

    import aryl, torch
    rt = aryl.Runtime.from_env()
    sampler = aryl.ElasticSampler(len(dataset), batch_size=64, seed=1)
    state = aryl.ElasticState(model=model, optimizer=opt, sampler=sampler)
    while rt.step(state) and state.step < steps:
        idx = sampler.local(rt.rank, rt.world_size)
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        if not rt.all_reduce_gradients(model):
            continue   # a peer failed: the step is abandoned and replayed
        opt.step()
    raise SystemExit(rt.exit_code)

Launch with aryl-rt-launch or aryl-run (ARYL_* environment); without it the
program runs alone. See docs/runtime.md ("Python API", "From torchrun").
"""
import torch  # loads libtorch before the bindings

from . import _aryl
from .sample_random import SampleDropout, sample_keys
from .state import ModuleSource, OptimizerSource, ValuesSource

__all__ = ["Runtime", "ElasticState", "ElasticSampler", "ModuleSource", "OptimizerSource", "ValuesSource",
           "SampleDropout", "sample_keys"]


class ElasticSampler(torch.utils.data.Sampler):
    """Which samples each rank trains on; every sample once per epoch across resizes.

    The position (epoch, cursor) is global and moves only when the runtime
    commits a step. With the default fixed global batch, rank r of w takes a
    contiguous slice of the step's `batch_size` samples (sizes differ by at
    most one), so training does not depend on the world size.

    As a torch.utils.data batch sampler, iterating yields one list: this
    rank's share of the current step (the rank and world of the last
    Runtime.step() that tracked it), so `DataLoader(ds, batch_sampler=sampler)`
    gives one batch per step. For the usual epoch loop (`for x, y in loader:`
    with one Runtime.step() per batch), use `batch_sampler=sampler.epoch_batches()`.
    """

    def __init__(self, dataset_size, batch_size, seed=0, shuffle=True, linear_scaling=False, reference_world=1,
                 order=None):
        """order: None (a seeded shuffle, or the dataset order with shuffle=False), or a function of the
        epoch returning a permutation of range(dataset_size): the epoch's global order (checked; ValueError
        naming the epoch and the bad entry otherwise). It must depend on the epoch only."""
        self._s = _aryl.ElasticSampler(int(dataset_size), int(batch_size), int(seed), shuffle, linear_scaling,
                                       reference_world, order)
        self._rank, self._world = 0, 1
        self._binds = 0  # Runtime.step() calls that bound it (epoch_batches checks them)

    @classmethod
    def like_distributed_sampler(cls, dataset_size, batch_size, world, seed=0, shuffle=True):
        """The order of torch.utils.data.DistributedSampler(shuffle, seed, drop_last=False) with
        DataLoader(batch_size=batch_size) at `world` ranks, set_epoch(epoch) called each epoch: at that
        world, rank r's share of each step is the batch rank r's DataLoader yields there, so a resizable
        run starts out sample for sample like the torchrun run it replaces. `batch_size` is per rank, as
        in the torchrun script; the global batch is batch_size x world and stays fixed when the world
        changes (each sample still once per epoch). Exact when dataset_size is a multiple of world;
        otherwise DistributedSampler repeats samples to pad the last step, and this sampler takes each once.
        `world` must be the same constant in every worker of the job (the torchrun run's size), not the
        current world size: a joiner that built the order at another size would take other samples."""
        n, world, b, seed = int(dataset_size), int(world), int(batch_size), int(seed)
        if n <= 0 or world <= 0 or b <= 0:
            raise ValueError(f"like_distributed_sampler: dataset_size={n}, batch_size={b} and world={world} "
                             "must be positive")

        return cls(n, b * world, seed=seed, order=_distributed_order(n, b, world, seed, shuffle))

    def local(self, rank, world):
        """This step's sample indices for `rank` of `world`."""
        return self._s.local(rank, world).indices

    def local_batch(self, rank, world):
        """indices, weight (local/global: scale a mean loss by it), epoch, global_size, last_in_epoch,
        random_keys (one per index: for SampleDropout, see aryl.sample_keys)."""
        return self._s.local(rank, world)

    def weight(self, rank, world):
        return self._s.local(rank, world).weight

    def learning_rate_scale(self, world):
        return self._s.learning_rate_scale(world)

    def global_batch(self, world=None):
        """Samples per step at `world` workers (default: the world of the last Runtime.step()):
        the batch_size given (fixed global batch), or batch_size x world / reference_world
        (linear_scaling). A per-device batch b of a torchrun script at w ranks is a global batch of b x w."""
        return self._s.global_batch(self._world if world is None else int(world))

    def steps_per_epoch(self, world=None):
        """Steps in a whole epoch at `world` (the last one may be shorter)."""
        return -(-self.dataset_size // self.global_batch(world))

    def steps_left_in_epoch(self, world=None):
        """Steps from the current position to the end of its epoch, at `world`."""
        return -(-(self.dataset_size - self.cursor) // self.global_batch(world))

    def epoch_batches(self):
        """A batch sampler for the epoch loop: `DataLoader(ds, batch_sampler=sampler.epoch_batches())`
        yields this rank's share of each step until the epoch ends, and its len() is the steps left
        in the epoch. Call Runtime.step(state) once before the loop (it joins or restores) and once
        at the end of each batch's body (it commits the step and applies resizes): each batch is
        taken at the rank and world of the Runtime.step() before it. With num_workers=0 only (a
        prefetching loader would take batches before the resize that changes them)."""
        return _EpochBatches(self)

    @property
    def epoch(self):
        return self._s.epoch

    @property
    def cursor(self):
        return self._s.cursor

    @property
    def dataset_size(self):
        return self._s.dataset_size

    def _bind(self, rank, world):
        self._rank, self._world = rank, world
        self._binds += 1

    def __iter__(self):
        yield self.local(self._rank, self._world)

    def __len__(self):
        return 1


class _EpochBatches:
    """ElasticSampler.epoch_batches(): this rank's share of each step of the current epoch."""

    def __init__(self, sampler):
        self._s = sampler

    def __len__(self):
        return self._s.steps_left_in_epoch()

    def __iter__(self):
        s = self._s
        if s._binds == 0:
            raise RuntimeError("aryl.ElasticSampler.epoch_batches(): call Runtime.step(state) once before the "
                               "loop (it joins the group or restores the state)")
        epoch, seen = s.epoch, None
        while s.epoch == epoch:
            if s._binds == seen:
                raise RuntimeError("aryl.ElasticSampler.epoch_batches(): no Runtime.step(state) since the last "
                                   "batch; call it once at the end of each batch's loop body")
            seen = s._binds
            yield s.local(s._rank, s._world)


class ElasticState:
    """Everything that moves to a joining worker and into a checkpoint.

    model, optimizer, sampler: one object or a list each. values: a dict of
    JSON-able values kept in sync (restored in place). random_state: also move
    the CPU random generator (dropout, augmentation) with the state.
    Construct it with the same objects in the same order on every worker.
    """

    def __init__(self, model=None, optimizer=None, sampler=None, values=None, random_state=False):
        self._cpp = _aryl.ElasticState()
        self._sources = []
        self.samplers = []
        for i, m in enumerate(_as_list(model)):
            self._track(ModuleSource(m), f"module{i}")
        for i, o in enumerate(_as_list(optimizer)):
            self._track(OptimizerSource(o), f"optimizer{i}")
        for i, s in enumerate(_as_list(sampler)):
            if not isinstance(s, ElasticSampler):
                raise TypeError(f"sampler {i} is a {type(s).__name__}, not an aryl.ElasticSampler")
            self._cpp.track_sampler(s._s, f"sampler{i}")
            self.samplers.append(s)
        if values is not None:
            self._track(ValuesSource(values), "values")
        if random_state:
            self._cpp.track_random_state()

    def _track(self, source, name):
        self._sources.append(source)
        self._cpp.track_source(source, name)

    @property
    def step(self):
        """Steps committed so far."""
        return self._cpp.step

    def serialize(self):
        return self._cpp.serialize()

    def deserialize(self, data):
        self._cpp.deserialize(data)


class Runtime:
    """The elastic runtime of this worker (aryl::Runtime)."""

    def __init__(self, cpp):
        self._rt = cpp
        self._state = None

    @staticmethod
    def from_env():
        """Reads the ARYL_* environment and connects; RuntimeError when it is wrong."""
        return Runtime(_aryl.Runtime.from_env())

    def step(self, state):
        """A step boundary: commits the last step, applies resizes. False: stop the loop."""
        ok = self._rt.step(state._cpp)
        self._state = state
        for s in state.samplers:
            s._bind(self._rt.rank, self._rt.world_size)
        return ok

    def all_reduce_gradients(self, model, weight=None):
        """Sums the gradients of `model` (a Module or an iterable of parameters) across ranks, each
        scaled by `weight` (default: this rank's share of the global batch of the tracked sampler,
        or 1/world_size without one). False when a peer failed: skip optimizer.step()."""
        params = list(model.parameters()) if isinstance(model, torch.nn.Module) else list(model)
        if weight is None:
            samplers = self._state.samplers if self._state is not None else []
            weight = samplers[0].weight(self.rank, self.world_size) if len(samplers) == 1 else -1.0
        return self._rt.all_reduce_gradients(params, float(weight))

    @property
    def rank(self):
        return self._rt.rank

    @property
    def world_size(self):
        return self._rt.world_size

    @property
    def generation(self):
        return self._rt.generation

    @property
    def worker_id(self):
        return self._rt.worker_id

    @property
    def ok(self):
        """True unless step() stopped on an error."""
        return self._rt.ok

    @property
    def status(self):
        """Why step() returned False ("OK" for a clean exit)."""
        return self._rt.status

    @property
    def exit_code(self):
        return self._rt.exit_code

    @property
    def resizes(self):
        """One dict per membership change (timed phases, seconds)."""
        return self._rt.resizes

    def checkpoint_now(self, state):
        return self._rt.checkpoint_now(state._cpp)

    def request_stop(self):
        self._rt.request_stop()

    def report_loss(self, loss):
        self._rt.report_loss(float(loss))


def _distributed_order(n, b, world, seed, shuffle):
    """The global order, per epoch, of torch's DistributedSampler(shuffle, seed) with DataLoader(batch_size=b)
    at `world` ranks: step k is rank 0's k-th batch, then rank 1's, ...; the padding repeats are dropped."""

    def order(epoch):
        if shuffle:
            g = torch.Generator()
            g.manual_seed(seed + epoch)  # DistributedSampler.__iter__
            idx = torch.randperm(n, generator=g)
        else:
            idx = torch.arange(n)
        per_rank = -(-n // world)
        total = per_rank * world
        idx = idx.repeat(-(-total // n))[:total]  # DistributedSampler's padding
        ranks = idx.view(per_rank, world).t()  # row r: rank r's samples, idx[r::world]
        steps = [ranks[:, k:k + b].reshape(-1) for k in range(0, per_rank, b)]  # rank 0's batch, rank 1's, ...
        out = torch.cat(steps).tolist()
        if total == n:
            return out
        seen = set()
        return [i for i in out if not (i in seen or seen.add(i))]

    return order


def _as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


# torch.distributed's names (init_process_group, DistributedSampler, DistributedDataParallel, ...):
# a DDP script is ported by its imports (ddp.py).
from .ddp import (DistributedDataParallel, DistributedSampler, destroy_process_group, get_rank,  # noqa: E402
                  get_world_size, init_process_group, is_initialized)

__all__ += ["init_process_group", "destroy_process_group", "is_initialized", "get_rank", "get_world_size",
            "DistributedSampler", "DistributedDataParallel"]
