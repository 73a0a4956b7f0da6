"""Dropout whose masks a resize does not change (aryl/sample_random.h).

torch.nn.Dropout draws each rank's mask from that rank's generator, so after a
resize a sample gets a different mask and a resized run drifts from a
fixed-size one. SampleDropout draws the mask of each sample from the sample's
key, SampleKey(seed, epoch, sample) of the ElasticSampler, alone (the same C++
function as C++ programs use): the masks of a local batch are the rows of the
global batch's masks at any world size.

    batch = sampler.local_batch(rt.rank, rt.world_size)
    with aryl.sample_keys(batch.random_keys):
        loss = loss_fn(model(x[batch.indices]), y[batch.indices])
"""
import contextlib
import itertools
import threading

import torch

from . import _aryl

_current = threading.local()
_salts = itertools.count(1)


@contextlib.contextmanager
def sample_keys(keys):
    """Makes `keys` (Batch.random_keys, one per row of the batch) the keys of every
    SampleDropout in the forward passes run inside the block (this thread)."""
    previous = getattr(_current, "keys", None)
    _current.keys = list(keys)
    try:
        yield
    finally:
        _current.keys = previous


class SampleDropout(torch.nn.Module):
    """Inverted dropout with per-sample masks drawn from the keys of aryl.sample_keys.

    salt tells the random layers of one model apart; by default each instance takes
    the next number of a per-process counter, which is the same on every worker when
    every worker builds the model the same way. Identity in eval mode or with p=0."""

    def __init__(self, p=0.5, salt=None):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"SampleDropout: p={p}, want [0, 1)")
        self.p = float(p)
        self.salt = next(_salts) if salt is None else int(salt)

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keys = getattr(_current, "keys", None)
        if keys is None:
            raise RuntimeError("SampleDropout needs the batch's keys: run the forward pass inside "
                               "`with aryl.sample_keys(batch.random_keys):`")
        if x.dim() < 1 or x.shape[0] != len(keys):
            raise ValueError(f"SampleDropout: input has {x.shape[0] if x.dim() else 0} rows, {len(keys)} keys")
        row = x.numel() // x.shape[0] if x.shape[0] else 0
        mask = _aryl.sample_dropout_mask(keys, row, self.p, self.salt)
        return x * mask.view(x.shape).to(dtype=x.dtype, device=x.device)

    def extra_repr(self):
        return f"p={self.p}, salt={self.salt}"
