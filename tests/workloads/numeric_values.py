"""Values for --numeric: what the reference's _tensor_stats must be matched on.

NaN, +Inf and -Inf among finite values, a tensor with no finite value at all, float16,
bfloat16, float32 and float64, int64 beyond 2**24 (min/max round through float32),
int8/uint8/int32 and bool, empty tensors, a 0-dim tensor, transposed and sliced
(non-contiguous) tensors, views with a storage offset, an even count (the lower
median), nested containers, an in-place module (its input is read at the call, before
it changes), outputs with NaN. Nothing here stops at a NaN: see nonfinite.py.
"""
import torch
from torch import nn


class Echo(nn.Module):
    def forward(self, *args, **kwargs):
        return args[0] if args else None


class AddOne(nn.Module):
    def forward(self, x):
        x.add_(1.0)          # in place: the reference's input stats are the value before
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.echo = Echo()
        self.lin = nn.Linear(8, 8)
        self.inplace = AddOne()
        self.relu = nn.ReLU()

    def forward(self, x):
        e = self.echo
        special = torch.tensor([1.5, float("nan"), -2.0, float("inf"), 3.25, float("-inf"),
                                float("nan"), 0.0])
        e(special)
        e(torch.tensor([float("nan"), float("inf"), float("-inf")]))
        e(torch.tensor([float("nan")] * 4, dtype=torch.float16))
        e(x.half(), x.bfloat16(), x.double())
        e(torch.tensor([1.0, 2.0, 3.0, 4.0]))          # even count: lower median 2.0
        e(torch.tensor([2 ** 40 + 1, -(2 ** 31) - 3, 16777217], dtype=torch.int64))
        e(torch.tensor([-5, 7, 100], dtype=torch.int8), torch.tensor([0, 255], dtype=torch.uint8),
          torch.tensor([123456789, -7], dtype=torch.int32))
        e(torch.tensor([True, False, True]), torch.tensor([True]))
        e(torch.zeros(0), torch.zeros(3, 0, dtype=torch.int64))
        e(torch.tensor(3.5), torch.tensor(7))
        big = torch.randn(6, 10)
        e(big.t(), big[:, ::3], big[2:, 4:])         # non-contiguous, storage offsets
        flat = torch.arange(40, dtype=torch.float32)
        e(flat[7:19].view(3, 4), flat.view(5, 8)[1:, 2:5].t())
        e([x, (x * 2, None)], {"a": x.sum(), "b": [special]})
        e(torch.randn(2, 3, 1, 2, 1, 2, 1))             # 7 dims: sizes out of line
        y = self.lin(x)
        y = self.inplace(y)
        z = self.relu(y)
        half = torch.randn(4, 5, dtype=torch.float16) * 60000
        e(half)                                           # float16 overflow: +-Inf
        e(z / torch.zeros_like(z))                        # NaN and Inf out of a module
        return z


def build():
    return Model()


def run(model):
    for _ in range(2):
        model(torch.randn(3, 8))
