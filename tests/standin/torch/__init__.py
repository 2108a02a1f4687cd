"""A stand-in for PyTorch: just enough of `torch` and `torch.nn` for module-call traces.

For pyenv Pythons that have no torch: `PYTHONPATH=tests/standin python3 ...` makes
`import torch` find this package. It has no tensors (`torch.Tensor` exists for
isinstance() and is never instantiated); modules are called with plain Python values.

What matters for evmbpf is that it has the *shape* of the real thing where an outside
reader looks: `Module.__call__` is `Module._call_impl(self, *args, **kwargs)` in a file
named `torch/nn/modules/module.py` (as in torch 1.x; torch >= 2.1 puts
`_wrapped_call_impl` in front), child modules live in the `_modules` dict in the
instance `__dict__`, and hooks behave as torch's do (with_kwargs pre-hooks receive
`(module, args, kwargs)`), so the reference tracer runs unchanged on it.
"""
from . import cuda, nn, utils  # noqa: F401
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401

__version__ = "0.0-standin"


class Tensor:
    """Never instantiated: only so that isinstance(x, torch.Tensor) works."""

    def __init__(self, *args, **kwargs):
        raise TypeError("the torch stand-in has no tensors")


def manual_seed(seed):
    """A no-op, as far as anything here can tell (returns None, unlike torch)."""
    return None


def is_tensor(obj):
    return isinstance(obj, Tensor)
