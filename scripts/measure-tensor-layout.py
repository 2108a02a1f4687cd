#!/usr/bin/env python3
"""Measure the TensorImpl layout of the torch this Python imports, the way the table in
user/collector/session/objects.c (`tensor_layouts`) was measured by hand: on a [3, 4, 7]
float16 view with storage offset 7 (and, with --cuda, the same on cuda:0), read through
/proc/self/mem in this very process. Prints the layout as the table's C initializer, or says
which field it could not find. Run it with the Python of the torch to measure:

    python3 scripts/measure-tensor-layout.py [--cuda]

A field is taken only where one offset fits: the pointer back to the Python object
(THPVariable) among the TensorImpl's first 512 bytes, sizes_and_strides_ ([ndim, sizes
..., strides ...] inline) after it, storage_offset_ and numel_ (7, 84), data_type_ (the
ScalarType number, float16 = 5) and device_opt_ (its three bytes in one of the known
orders), and storage_ (the StorageImpl whose data pointer is the storage's). torch < 1.8
(SmallVector sizes_, a TypeMetaData pointer for the dtype) is another shape: not
measured here (the table's torch 1.7 line was measured by hand)."""
import os
import struct
import sys

import torch


MEM = open("/proc/self/mem", "rb", buffering=0)  # an unmapped address is an OSError here


def read(addr, n):
    data = os.pread(MEM.fileno(), n, addr)
    if len(data) != n:
        raise OSError(f"short read at {addr:#x}")
    return data


def words(addr, n):
    return struct.unpack(f"<{n}Q", read(addr, 8 * n))


def measure(device):
    base = torch.arange(3 * 4 * 7 + 16, dtype=torch.float32, device=device).half()
    t = base[7:7 + 84].view(3, 4, 7)
    assert t.storage_offset() == 7 and t.numel() == 84
    obj = id(t)
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    data = storage.data_ptr()
    found = []
    for impl_off in (16, 24, 32):
        impl = words(obj + impl_off, 1)[0]
        if impl < 4096 or impl >= 1 << 48:
            continue
        try:
            w = words(impl, 80)
        except (OSError, ValueError):
            continue
        backs = [8 * i for i, v in enumerate(w[:64]) if v & ~1 == obj]
        if len(backs) != 1:
            continue
        back = backs[0]
        # [ndim][sizes, 5 inline][strides, 5 inline]
        sizes = [8 * i for i in range(back // 8, 64)
                 if w[i:i + 4] == (3, 3, 4, 7) and w[i + 6:i + 9] == (28, 7, 1)]
        numel = [8 * i for i in range(back // 8, 64) if w[i] == 7 and w[i + 1] == 84]
        if len(sizes) != 1 or len(numel) != 1:
            print(f"  impl_off {impl_off}: back {back}, sizes {sizes}, numel {numel}: does "
                  f"not fit", file=sys.stderr)
            continue
        numel_off = numel[0] + 8
        raw = read(impl + numel_off + 8, 8)
        dtype = struct.unpack("<H", raw[:2])[0]
        dev_type = 1 if device.startswith("cuda") else 0
        dev_index = 0 if dev_type else -1
        dev = raw[2:5]
        orders = {0: bytes([1, dev_type, dev_index & 0xff]),
                  1: bytes([dev_type, dev_index & 0xff, 1])}
        order = [k for k, v in orders.items() if dev == v]
        storages = []
        for i in range(1, 64):
            p = w[i]
            if p < 4096 or p >= 1 << 48 or i * 8 == back:
                continue
            for sd in (16, 24, 32):  # the first: its DataPtr's own pointer
                try:
                    if words(p + sd, 1)[0] == data:
                        storages.append((8 * i, sd))
                        break
                except (OSError, ValueError):
                    pass
        if dtype != 5 or len(order) != 1 or len(storages) != 1:
            print(f"  impl_off {impl_off}: back {back}, sizes {sizes}, numel {numel_off}, "
                  f"dtype {dtype}, device bytes {dev.hex()} ({order}), storages "
                  f"{storages}: does not fit", file=sys.stderr)
            continue
        found.append(dict(impl_off=impl_off, backptr_off=back, sizes_off=sizes[0],
                          numel_off=numel_off, dtype_off=numel_off + 8,
                          device_off=numel_off + 10, device_order=order[0],
                          storage_off=storages[0][0], sdata_off=storages[0][1]))
    return found


def main():
    devices = ["cpu"] + (["cuda:0"] if "--cuda" in sys.argv[1:] else [])
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")
    layouts = []
    for device in devices:
        found = measure(device)
        if len(found) != 1:
            print(f"{device}: {len(found)} layouts fit ({found}): not measured", file=sys.stderr)
            return 1
        print(f"{device}: {found[0]}")
        layouts.append(found[0])
    if any(layout != layouts[0] for layout in layouts):
        print("the devices' layouts differ", file=sys.stderr)
        return 1
    lay = layouts[0]
    print(f"\t/* torch {torch.__version__.split('+')[0]} */\n"
          f"\t{{ .impl_off = {lay['impl_off']}, .backptr_off = {lay['backptr_off']}, "
          f".sizes_off = {lay['sizes_off']}, .numel_off = {lay['numel_off']},\n"
          f"\t  .dtype_off = {lay['dtype_off']}, .device_off = {lay['device_off']}, "
          f".device_order = {lay['device_order']}, .storage_off = {lay['storage_off']},\n"
          f"\t  .sdata_off = {lay['sdata_off']} }},")
    return 0


if __name__ == "__main__":
    sys.exit(main())
