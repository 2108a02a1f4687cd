"""--numeric --cupti end to end on a machine without a GPU: tensors that read as CUDA
tensors from outside. A CPU tensor's device bytes (TensorImpl's device_opt_ and its
storage's DataPtr device, torch 1.13's layout) are set to cuda:0 by this process itself
(the test's own trick: evmbpf writes nothing); nothing ever operates on them, they are
only passed to and returned from modules. With EVMBPF_TEST_INJECT=1 the CUPTI agent is
loaded as the driver would load it, with the tests' stand-in libcuda, whose
"device memory" is this process's memory: the agent's reductions read the real values.
Prints EXPECT <json>: the reference's _tensor_stats of each one, computed before the
retagging, by name. A raised module leaves a frame whose `unwound` event carries its
args' stats."""
import ctypes
import json
import os

import torch

from evalmetry import debug


def retag(t):
    impl = t._cdata
    b = (ctypes.c_uint8 * 3).from_address(impl + 178)
    storage = ctypes.c_uint64.from_address(impl + 24).value
    d = (ctypes.c_uint8 * 2).from_address(storage + 48)
    assert list(b) == [1, 0, 255] and list(d) == [0, 255], (list(b), list(d))
    b[1], b[2], d[0], d[1] = 1, 0, 1, 0
    return t


class Sink(torch.nn.Module):
    def forward(self, x, fake):
        return fake          # returned as it came: the exit describes it too


class Raiser(torch.nn.Module):
    def forward(self, fake):
        raise ValueError("left on the stack")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sink = Sink()
        self.raiser = Raiser()

    def forward(self, x, fake, other):
        try:
            self.raiser(other)
        except ValueError:
            pass
        return self.sink(x, fake)


def build():
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if path and os.environ.get("EVMBPF_TEST_INJECT") == "1":
        print("InitializeInjection:", ctypes.CDLL(path).InitializeInjection(), flush=True)
    return Net()


KEEP = []


def run(model):
    g = torch.Generator().manual_seed(3)
    base = torch.randn(4000, generator=g, dtype=torch.float64) * 7
    base[::53] = float("nan")
    base[9::301] = float("inf")
    tensors = {
        "strided": base.as_strided([30, 40], [1, 90], 11).to(torch.float32),
        "half": (torch.randn(257, generator=g) * 300).half(),
        "ints": torch.randint(-2 ** 40, 2 ** 40, (99,), generator=g),
    }
    # the strided one: a view of a float32 copy, so that the retagged storage is strided
    storage = torch.randn(5000, generator=g).float()
    storage[::7] = float("-inf")
    tensors["view"] = storage.as_strided([25, 30], [2, 77], 5)
    expect = {k: debug._tensor_stats(v) for k, v in tensors.items()}
    print("EXPECT " + json.dumps(expect), flush=True)
    for v in tensors.values():
        KEEP.append(retag(v))
    x = torch.ones(2, 3)
    for name in ("strided", "half", "ints", "view"):
        model(x, tensors[name], tensors["view" if name != "view" else "half"])
