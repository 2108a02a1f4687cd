"""A real CUDA caching allocator without a device: Debian trixie's CUDA build of
libc10_cuda.so (scripts/torch-cuda.sh) loaded beside the CPU torch 2.6, its allocator
initialised for two devices through its own virtual init(int) (NativeCachingAllocator's
constructor of each DeviceCachingAllocator touches no device), then module calls.

CUDA_ALLOCATOR_INIT: "build" initialises before run() (before a --pid attach), "run" at
the start of run() (after the attach), "between" after the first forward (between two
module calls), "none" never. CUDA_ALLOCATOR_POKE=1: before each forward k, device 0's
DeviceStats get the counters of forward k (pools that add up), so that a reader of the
allocator's counters has numbers to see change; the place is found here by the same
chain, in-process; "bad": counters that do not add up. CUDA_ALLOCATOR_RAISE=1: an
exception escapes run() at the end (the error event). No device:
torch.cuda.is_available() is False.

CUDA_ALLOCATOR_STANDIN: tests/standin/cudart's libcudart_devices.so, loaded first: c10's
device functions (SetDevice, GetDevice, current_device, device_count_ensure_non_zero) then
run as with two devices, and the init goes as torch's lazy init does it
(device_count_ensure_non_zero(), then the allocator's init(count)); run() calls
current_device() first, as the first CUDA operation would. CUDA_ALLOCATOR_THREADS=1 (with
it): two threads set device 1 in build() (before a --pid attach), each device's
DeviceStats get counters of their own (device_counters), and run() calls one forward on
the main thread (device 0), one on the first thread after current_device(), then on the
second thread one forward before any device function and one after current_device().

CUDA_ALLOCATOR_LAYOUT (after the init): "vtable" puts each device's allocator as a
polymorphic class would lay it out: the vector's elements are made to point at copies
of the real DeviceCachingAllocators with a vtable pointer (the NativeCachingAllocator's
own) before them, so that the mutex and DeviceStats are 8 bytes later (the copies are
this process's memory; the counters are poked there); "alien": at zeroed buffers, no
allocator of any layout. The vector's own elements are put back at exit (the library's
destructors free them)."""
import threading
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


def device_counters(d):
    """allocated, max_allocated, reserved of device d (CUDA_ALLOCATOR_THREADS)"""
    return 1000 * (d + 1), 3000 * (d + 1), (1 << 21) * (d + 1)


STANDIN = os.environ.get("CUDA_ALLOCATOR_STANDIN")


def _load():
    if STANDIN:
        ctypes.CDLL(STANDIN, mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(os.path.join(LIB, "libcudart.so.12"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(LIB, "libc10_cuda.so.2.6"), mode=ctypes.RTLD_GLOBAL)
    obj = ctypes.c_void_p.in_dll(lib, SYMBOL).value
    _state["lib"] = lib
    _state["obj"] = obj
    _state["vtable"] = ctypes.c_void_p.from_address(obj).value


def _c10(name, restype, *argtypes):
    f = getattr(_state["lib"], name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


def set_device(d):
    _c10("_ZN3c104cuda9SetDeviceEa", ctypes.c_int, ctypes.c_int8)(d)


def current_device():
    return _c10("_ZN3c104cuda14current_deviceEv", ctypes.c_int8)()


def _init():
    obj, slots = _state["obj"], (ctypes.c_void_p * 16).from_address(_state["vtable"])
    n = 2
    if STANDIN:  # as torch's lazy init: the device count, then the allocator's init
        n = _c10("_ZN3c104cuda28device_count_ensure_non_zeroEv", ctypes.c_int8)()
        assert n == 2, n
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)(slots[INIT_SLOT])(obj, n)
    assert ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)(slots[INITIALIZED_SLOT])(obj)
    if LAYOUT:
        _relayout()


LAYOUT = os.environ.get("CUDA_ALLOCATOR_LAYOUT", "")


def _vector():
    """device_allocator's begin: the vector found as evmbpf finds it (once)"""
    if "vector" in _state:
        return _state["vector"]
    obj, words = _state["obj"], ()
    for page in range(16):  # a page at a time (quick), never past the vector
        words += struct.unpack("512Q", ctypes.string_at(obj + 4096 * page, 4096))
        for i in range(max(1, 512 * page - 2), len(words) - 2):
            begin, end, cap = words[i:i + 3]
            if begin and end - begin == 16 and cap >= end:
                _state["vector"] = begin
                return begin
    raise RuntimeError("no device_allocator vector")


def _stats(d=0):
    elem = struct.unpack("Q", ctypes.string_at(_vector() + 8 * d, 8))[0]
    return elem + (48 if LAYOUT == "vtable" else 40)


def _relayout():
    """CUDA_ALLOCATOR_LAYOUT: the vector's elements at copies laid out another way"""
    import atexit
    begin = _vector()
    slots = (ctypes.c_uint64 * 2).from_address(begin)
    real = list(slots)
    keep = []
    for d, elem in enumerate(real):
        copy = ctypes.create_string_buffer(2048)
        if LAYOUT == "vtable":
            ctypes.memmove(ctypes.addressof(copy), struct.pack("Q", _state["vtable"]), 8)
            ctypes.memmove(ctypes.addressof(copy) + 8, elem, 2040)
        keep.append(copy)
        slots[d] = ctypes.addressof(copy)
    _state["copies"] = keep

    def restore():
        for d, elem in enumerate(real):
            slots[d] = elem
    atexit.register(restore)


def _stats0():
    return _stats(0)


def _poke(k, d=0, values=None):
    stats = _stats(d)
    allocated, peak, reserved = values or expected(k)
    for base, cur, pk in ((384, allocated, peak), (480, reserved, reserved)):
        # Stat {current, peak, allocated, freed} x [AGGREGATE, SMALL_POOL, LARGE_POOL]
        ctypes.memmove(stats + base, struct.pack("qqqq", cur, pk, cur, 0), 32)
        ctypes.memmove(stats + base + 32, struct.pack("qqqq", cur, pk, cur, 0), 32)
        ctypes.memmove(stats + base + 64, struct.pack("qqqq", 0, 0, 0, 0), 32)


class _Thread(threading.Thread):
    """sets its device at once, then waits for work"""

    def __init__(self, device):
        super().__init__(daemon=True)
        self.device, self.work, self.ready, self.done = device, None, threading.Event(), threading.Event()
        self.go = threading.Event()

    def run(self):
        set_device(self.device)
        assert current_device() == self.device
        self.ready.set()
        self.go.wait()
        self.work()
        self.done.set()


def build():
    _load()
    if os.environ.get("CUDA_ALLOCATOR_INIT", "build") == "build":
        _init()
    if os.environ.get("CUDA_ALLOCATOR_THREADS") == "1":
        _state["threads"] = [_Thread(1), _Thread(1)]
        for t in _state["threads"]:
            t.start()
            t.ready.wait()
    if os.environ.get("CUDA_ALLOCATOR_POKE") == "bad":
        # pools that do not add up: no DeviceStats as any torch lays it out
        ctypes.memmove(_stats0() + 384, struct.pack("qq", 7, 9), 16)
    torch.manual_seed(0)
    return Model()


def _threads(model, x):
    for d in (0, 1):
        _poke(0, d, device_counters(d))
    with torch.no_grad():
        assert current_device() == 0
        model(x)  # the main thread, device 0

        def first():
            assert current_device() == 1
            with torch.no_grad():
                model(x)

        def second():
            with torch.no_grad():
                model(x)  # before any device function: not known from outside
                assert current_device() == 1
                model(x)

        for t, work in zip(_state["threads"], (first, second)):
            t.work = work
            t.go.set()
            t.done.wait()


def run(model):
    init = os.environ.get("CUDA_ALLOCATOR_INIT", "build")
    if init == "run":
        _init()
        time.sleep(float(os.environ.get("CUDA_ALLOCATOR_SETTLE", "0")))
    if STANDIN and init != "between":
        current_device()  # as the first CUDA operation does
    x = torch.ones(2, 4)
    if os.environ.get("CUDA_ALLOCATOR_THREADS") == "1":
        _threads(model, x)
        return
    with torch.no_grad():
        for k in range(int(os.environ.get("CUDA_ALLOCATOR_FORWARDS", "4"))):
            if init == "between" and k == 1:
                _init()  # then at once a module call: no time for a poll
                current_device()
            if os.environ.get("CUDA_ALLOCATOR_POKE") == "1" and (init != "between" or k >= 1):
                _poke(k)
            model(x)
    time.sleep(float(os.environ.get("CUDA_ALLOCATOR_LINGER", "0")))  # for a measurement
    if os.environ.get("CUDA_ALLOCATOR_RAISE") == "1":
        raise RuntimeError("CUDA out of memory (a stand-in)")
