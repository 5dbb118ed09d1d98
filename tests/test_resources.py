"""Peak memory in a run's timings: a task's own peaks, and the line `detrun timings` prints from them."""

import subprocess
import sys

from detrun.run.resources import memory_line, peaks


def test_a_cpu_task_records_its_host_peak_only():
    """In a fresh process, memory touched up to 256 MB past the peak so far raises the recorded peak by that."""
    code = ("import os, torch; from detrun.run.resources import task_peaks; cpu = torch.device('cpu'); "
            "before = task_peaks(cpu)['host_peak_mb']; "
            "rss = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20; "
            "grown = bytearray(int(before - rss + 256) << 20); peaks = task_peaks(cpu); "
            "print(sorted(peaks), peaks['host_peak_mb'] - before)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names, grown = out.stdout.split("] ")
    assert names == "['host_peak_mb'" and 250 <= float(grown) < 270


def test_the_line_names_the_largest_task_of_each_peak_and_the_driver():
    shards = {
        "g0-r0": {"memory": dict(host_peak_mb=900.0, device_allocated_peak_mb=5000.0, device_reserved_peak_mb=6144.0)},
        "g1-r0": {"memory": dict(host_peak_mb=1200.4, device_allocated_peak_mb=4000.0, device_reserved_peak_mb=8192.0)},
        "old": {"stages": {}},  # a task from before memory was recorded
    }
    assert peaks(shards)["device_allocated_peak_mb"] == (5000.0, "g0-r0")
    assert memory_line({"driver_peak_rss_mb": 310.2}, shards) == (
        "peak memory (largest of 2 tasks): task host RSS 1200 MB (g1-r0), device allocated 5000 MB (g0-r0), "
        "device reserved 8192 MB (g1-r0), driver RSS 310 MB")
    assert memory_line({}, {"old": {}}) is None
