"""Dependency-free benchmark helpers (torch + stdlib only).

This module must not import ``titans_atlas``: it is also imported by the runners in
``benchmarks/external/`` that execute inside separate virtual environments.

Peak-memory method: the callable is built and run in a fresh ``spawn`` subprocess. There,
glibc's mmap threshold is pinned at 128 KiB (so freed tensors go back to the OS and RSS
tracks live memory), the callable is built and warmed up, then the kernel's RSS high-water
mark is reset (``/proc/self/clear_refs`` <- ``5``) and the current RSS is taken as baseline.
The reported peak is ``VmHWM`` after one call minus that baseline. If the reset is not
permitted, ``ru_maxrss`` is used instead and the method string says it may include setup.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing as mp
import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter id


@dataclass
class Timing:
    """Wall-clock times of repeated calls, in seconds.

    ``other_cpu_s``: CPU seconds used meanwhile by other processes (and hypervisor steal).
    On a shared 2-core box one busy neighbour can slow 2-thread OpenMP calls 10-50x (threads
    spin-wait for a descheduled peer): discard runs where it is not near 0.
    ``cpu_times_s``: this process's CPU time of each call. With one thread it leaves out the
    time spent waiting for a core, so it moves far less than wall time with the load.
    """

    median_s: float
    times_s: list[float]
    other_cpu_s: float
    cpu_times_s: list[float] = field(default_factory=list)

    @property
    def cpu_median_s(self) -> float:
        return statistics.median(self.cpu_times_s)


def bf16_autocast(device: str, dtype: str) -> torch.autocast:
    """The step's precision: ``dtype`` "bf16" is autocast to bfloat16 over fp32 parameters
    (as training runs it), "fp32" a no-op. Ours and titans-pytorch's benchmarks use the same."""
    enabled = dtype == "bf16"
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=enabled)


def as_generate_decodes() -> contextlib.AbstractContextManager:
    """The decode steps as ``titans_atlas.generate`` runs them: after the (checked) prefill,
    the memory layers' per-call value checks are off. Revisions without ``validating``
    checked nothing per step, so there it is a no-op."""
    try:
        from titans_atlas.ops import validating
    except ImportError:
        return contextlib.nullcontext()
    return validating(False)


def set_threads(n: int) -> None:
    """Use ``n`` intra-op threads (and, if still possible, ``n`` inter-op threads)."""
    torch.set_num_threads(n)
    with contextlib.suppress(RuntimeError):  # settable once, before any inter-op work
        torch.set_num_interop_threads(n)


def threads_to_compare(parser: Any, threads: int) -> int:
    """``threads`` for a benchmark that compares it with one thread; a count below 2 is a
    usage error naming ``--threads`` (``parser`` is the script's ``argparse`` parser)."""
    if threads < 2:
        parser.error(f"--threads must be at least 2 (compared with one thread), got {threads}")
    return threads


def machine_busy_cpu_s() -> float:
    """Non-idle CPU seconds (incl. steal) of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def time_callable(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed with perf_counter."""
    for _ in range(warmup):
        fn()
    times, cpu_times = [], []
    busy0, own0 = machine_busy_cpu_s(), time.process_time()
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    other = machine_busy_cpu_s() - busy0 - (time.process_time() - own0)
    return Timing(statistics.median(times), times, max(other, 0.0), cpu_times)


def _proc_status_bytes(key: str) -> int:
    """Read a ``kB`` field such as ``VmRSS`` from /proc/self/status, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0); return whether it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _memory_child(
    conn: Any, factory: Callable[..., Callable[[], Any]], args: tuple, threads: int, warmup: int
) -> None:
    with contextlib.suppress(OSError):  # not glibc: keep the default allocator settings
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    set_threads(threads)
    fn = factory(*args)
    for _ in range(warmup):
        fn()
    gc.collect()
    reset = _reset_peak_rss()
    baseline = _proc_status_bytes("VmRSS")
    fn()
    if reset:
        peak, method = _proc_status_bytes("VmHWM"), "VmHWM after clear_refs reset"
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        method = "ru_maxrss, not reset (may include setup and warmup peaks)"
    result = {"peak_bytes": max(peak - baseline, 0), "baseline_rss_bytes": baseline}
    result.update(peak_rss_bytes=peak, method=method)
    conn.send(result)
    conn.close()


def peak_memory(
    factory: Callable[..., Callable[[], Any]], *args: Any, threads: int = 2, warmup: int = 1
) -> dict[str, Any]:
    """Peak RSS growth of one call of ``factory(*args)()`` in a fresh subprocess.

    ``factory`` must be picklable (a module-level function); it does the setup (model,
    inputs) and returns the zero-argument callable to measure. See the module docstring.
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_memory_child, args=(child, factory, args, threads, warmup))
    proc.start()
    child.close()
    try:
        result = parent.recv()
    except EOFError:
        proc.join()
        raise RuntimeError(f"memory child died (exit code {proc.exitcode})") from None
    proc.join()
    return result


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, threads: int | None = None) -> float:
    """Median GFLOP/s of an fp32 ``n x n @ n x n`` torch.matmul (2 n^3 flops per call)."""
    if threads is not None:
        set_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    timing = time_callable(lambda: torch.matmul(a, b, out=out), warmup=2, repeats=repeats)
    return 2 * n**3 / timing.median_s / 1e9


if __name__ == "__main__":  # python _harness.py [N]: matmul peak with 1 and 2 threads
    import json
    import sys

    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    gflops = {f"{t}thread": round(matmul_peak_gflops(size, threads=t), 1) for t in (1, 2)}
    print(json.dumps({"torch": torch.__version__, "n": size, "matmul_fp32_gflops": gflops}))
