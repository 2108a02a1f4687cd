"""A real CUDA caching allocator without a device: Debian trixie's CUDA build of
libc10_cuda.so (scripts/torch-cuda.sh) loaded beside the CPU torch 2.6, its allocator
initialised for two devices through its own virtual init(int) (NativeCachingAllocator's
constructor of each DeviceCachingAllocator touches no device), then module calls.

CUDA_ALLOCATOR_INIT: "build" initialises before run() (before a --pid attach), "run" at
the start of run() (after the attach), "none" never. CUDA_ALLOCATOR_POKE=1: before each
forward k, device 0's DeviceStats get the counters of forward k (pools that add up), so
that a reader of the allocator's counters has numbers to see change; the place is found
here by the same chain, in-process; "bad": counters that do not add up. CUDA_ALLOCATOR_RAISE=1: an
exception escapes run() at the end (the error event). No device: torch.cuda.is_available() is False."""
import ctypes
import os
import struct
import time

import torch
from torch import nn

LIB = os.environ.get("CUDA_ALLOCATOR_LIB", "/evmbpf/torch-cuda/lib")
SYMBOL = "_ZN3c104cuda20CUDACachingAllocator9allocatorE"
INIT_SLOT, INITIALIZED_SLOT = 9, 10  # torch 2.6's CUDAAllocator vtable


def expected(k):
    """allocated, max_allocated, reserved poked before forward k"""
    return 512 * (k + 1), 4096 * (k + 1), (1 << 20) * (k + 1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = Block()

    def forward(self, x):
        return self.b(self.a(x))


_state = {}


def _load():
    ctypes.CDLL(os.path.join(LIB, "libcudart.so.12"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(LIB, "libc10_cuda.so.2.6"), mode=ctypes.RTLD_GLOBAL)
    obj = ctypes.c_void_p.in_dll(lib, SYMBOL).value
    _state["obj"] = obj
    _state["vtable"] = ctypes.c_void_p.from_address(obj).value


def _init():
    obj, slots = _state["obj"], (ctypes.c_void_p * 16).from_address(_state["vtable"])
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)(slots[INIT_SLOT])(obj, 2)
    assert ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)(slots[INITIALIZED_SLOT])(obj)


def _stats0():
    obj = _state["obj"]
    for off in range(8, 0x10000, 8):
        begin, end, cap = struct.unpack("QQQ", ctypes.string_at(obj + off, 24))
        if begin and end - begin == 16 and cap >= end:
            return struct.unpack("Q", ctypes.string_at(begin, 8))[0] + 40
    raise RuntimeError("no device_allocator vector")


def _poke(k):
    stats = _stats0()
    allocated, peak, reserved = expected(k)
    for base, cur, pk in ((384, allocated, peak), (480, reserved, reserved)):
        # Stat {current, peak, allocated, freed} x [AGGREGATE, SMALL_POOL, LARGE_POOL]
        ctypes.memmove(stats + base, struct.pack("qqqq", cur, pk, cur, 0), 32)
        ctypes.memmove(stats + base + 32, struct.pack("qqqq", cur, pk, cur, 0), 32)
        ctypes.memmove(stats + base + 64, struct.pack("qqqq", 0, 0, 0, 0), 32)


def build():
    _load()
    if os.environ.get("CUDA_ALLOCATOR_INIT", "build") == "build":
        _init()
    if os.environ.get("CUDA_ALLOCATOR_POKE") == "bad":
        # pools that do not add up: no DeviceStats as any torch lays it out
        ctypes.memmove(_stats0() + 384, struct.pack("qq", 7, 9), 16)
    torch.manual_seed(0)
    return Model()


def run(model):
    if os.environ.get("CUDA_ALLOCATOR_INIT", "build") == "run":
        _init()
        time.sleep(float(os.environ.get("CUDA_ALLOCATOR_SETTLE", "0")))
    x = torch.ones(2, 4)
    with torch.no_grad():
        for k in range(int(os.environ.get("CUDA_ALLOCATOR_FORWARDS", "4"))):
            if os.environ.get("CUDA_ALLOCATOR_POKE") == "1":
                _poke(k)
            model(x)
    time.sleep(float(os.environ.get("CUDA_ALLOCATOR_LINGER", "0")))  # for a measurement
    if os.environ.get("CUDA_ALLOCATOR_RAISE") == "1":
        raise RuntimeError("CUDA out of memory (a stand-in)")
