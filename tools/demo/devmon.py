#!/usr/bin/env python3
"""The demo's view of device 0, through the CUDA driver API (ctypes on libcuda.so.1: simgpu when
LD_LIBRARY_PATH points at it, else the machine's driver).

  devmon.py capacity          prints "<total bytes> <device name>"
  devmon.py watch STOP OUT    samples the device's used memory (total - free, every process's) every
                              0.5 ms until the file STOP exists, then writes the highest value to OUT

On simgpu the watcher's own context costs nothing (the demo runs it with SIMGPU_CONTEXT_BYTES=0);
on a real GPU the demo uses nvidia-smi instead, which needs no context.
"""
import ctypes
import os
import sys
import time


def driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    check(cuda.cuInit(0), "cuInit")
    return cuda


def check(rc, what):
    if rc != 0:
        sys.exit(f"devmon: {what} failed with CUresult {rc}")


def capacity(cuda):
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    total = ctypes.c_size_t()
    check(cuda.cuDeviceTotalMem_v2(ctypes.byref(total), dev), "cuDeviceTotalMem")
    name = ctypes.create_string_buffer(256)
    check(cuda.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
    return dev, total.value, name.value.decode(errors="replace")


def watch(cuda, stop, out):
    dev, _, _ = capacity(cuda)
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    peak = 0
    while not os.path.exists(stop):
        if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0:
            peak = max(peak, total.value - free.value)
        time.sleep(0.0005)
    with open(out, "w") as f:
        f.write(f"{peak}\n")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "capacity":
        _, total, name = capacity(driver())
        print(total, name)
    elif len(sys.argv) == 4 and sys.argv[1] == "watch":
        watch(driver(), sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
