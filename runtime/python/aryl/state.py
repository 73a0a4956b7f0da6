"""StateSources for PyTorch objects: what of a module, an optimizer or a dict
of values moves to joining workers and into checkpoints.

Each source describes itself in small metadata (JSON) and hands the runtime
its tensors; the runtime (C++) broadcasts those tensors in place and writes
them into checkpoints. A receiver first restores the metadata, which creates
missing optimizer state with the sender's shapes, so any optimizer whose
state is tensors and plain values works: SGD (momentum), Adam, AdamW and the
others torch ships.
"""
import json

import torch

from . import _aryl


def _dtype(name):
    return getattr(torch, name.split(".")[-1])


def _plain(value):
    """A JSON-able hyperparameter (tuples become lists)."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        raise TypeError("tensor-valued hyperparameters are not supported")
    return value


class ModuleSource(_aryl.StateSource):
    """Parameters and buffers of a torch.nn.Module, in registration order."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def _named(self):
        return list(self.module.named_parameters()) + list(self.module.named_buffers())

    def metadata(self):
        return json.dumps([[n, list(t.shape), str(t.dtype)] for n, t in self._named()]).encode()

    def restore(self, metadata):
        theirs = json.loads(metadata)
        ours = json.loads(self.metadata())
        if theirs != ours:
            diff = next((f"{a} != {b}" for a, b in zip(theirs, ours) if a != b), f"{len(theirs)} != {len(ours)} tensors")
            raise ValueError(f"module {type(self.module).__name__} differs from the sender's: {diff}")

    def tensors(self):
        return [t.detach() for _, t in self._named()]


class OptimizerSource(_aryl.StateSource):
    """Hyperparameters of every param group and the per-parameter state."""

    def __init__(self, optimizer):
        super().__init__()
        self.optimizer = optimizer

    def _params(self):
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _state_entries(self):
        """(parameter index, parameter, sorted state keys) for parameters with state."""
        out = []
        for i, p in enumerate(self._params()):
            st = self.optimizer.state.get(p)
            if st:
                out.append((i, p, sorted(st.keys())))
        return out

    def metadata(self):
        groups = [{k: _plain(v) for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        state = []
        for i, p, keys in self._state_entries():
            st = self.optimizer.state[p]
            tensors = [[k, list(st[k].shape), str(st[k].dtype)] for k in keys if isinstance(st[k], torch.Tensor)]
            values = {k: _plain(st[k]) for k in keys if not isinstance(st[k], torch.Tensor)}
            state.append({"index": i, "tensors": tensors, "values": values})
        return json.dumps({"kind": type(self.optimizer).__name__, "groups": groups, "state": state}).encode()

    def restore(self, metadata):
        m = json.loads(metadata)
        kind = type(self.optimizer).__name__
        if m["kind"] != kind or len(m["groups"]) != len(self.optimizer.param_groups):
            raise ValueError(f"optimizer {kind} with {len(self.optimizer.param_groups)} groups differs from the "
                             f"sender's {m['kind']} with {len(m['groups'])}")
        for group, saved in zip(self.optimizer.param_groups, m["groups"]):
            for k, v in saved.items():
                group[k] = tuple(v) if isinstance(v, list) else v
        params = self._params()
        self.optimizer.state.clear()
        for entry in m["state"]:
            p = params[entry["index"]]
            st = {k: v for k, v in entry["values"].items()}
            for k, shape, dtype in entry["tensors"]:
                st[k] = torch.zeros(shape, dtype=_dtype(dtype), device=p.device)
            self.optimizer.state[p] = st

    def tensors(self):
        out = []
        for _, p, keys in self._state_entries():
            st = self.optimizer.state[p]
            out.extend(st[k] for k in keys if isinstance(st[k], torch.Tensor))
        return out


class ValuesSource(_aryl.StateSource):
    """A dict of JSON-able values (epoch counters, best loss, ...), updated in place."""

    def __init__(self, values):
        super().__init__()
        self.values = values

    def metadata(self):
        return json.dumps(self.values).encode()

    def restore(self, metadata):
        self.values.clear()
        self.values.update(json.loads(metadata))

    def tensors(self):
        return []
