"""Where the first profile session's start goes (3.2-6.1 s of a task's critical path): CUPTI's own set-up, or
what torch's profiler (kineto) asks of it. Each way runs in a fresh process that has imported torch and run a
GEMM (the CUDA context and cuBLAS loaded, as a task has before its first cell):

    python bench/cupti_start.py [--rounds 2]

- `torch`: `torch.profiler.profile(activities=[CUDA])` entered (what kernel_session.py opens);
- `kernel`: CUPTI's activity API through NVIDIA's cupti-python, kernel records only (CONCURRENT_KERNEL);
- `kinds`: as `kernel`, then kineto's other CUDA kinds enabled one at a time, each timed;
- `kernel+torch`: `kernel`'s set-up, then torch's profiler entered in the same process; CUPTI's names (demangled
  as the audit's cupti tracer does, kernel_session_cupti.py) against torch's for the same kernels.
Each way runs two GEMMs, each followed by a tanh, under its session and reads back the kernels' names. Exit 1 if
a way saw fewer than two kernels or found other names than torch's; 2 without CUDA or cupti-python (checked
first); 3 if a way's process failed anyway.
Needs CUDA and the cupti-python wheel (pip install cupti-python==13.0.*). Prints seconds per step, per round.
"""

import argparse
import importlib.util
import json
import subprocess
import sys
import time

WAYS = ("torch", "kernel", "kinds", "kernel+torch")
# kineto's CUDA activity kinds besides kernels (libkineto's CuptiActivityApi::enableCuptiActivities)
KINETO_KINDS = ("RUNTIME", "DRIVER", "MEMCPY", "MEMSET", "OVERHEAD", "EXTERNAL_CORRELATION", "SYNCHRONIZATION")


def _gemms(torch, a):
    for _ in range(2):
        a = (a @ a).tanh_()  # cuBLAS's GEMM (a C name) and torch's templated tanh kernel (a mangled C++ name)
    torch.cuda.synchronize()


def _cupti_session(steps):
    """CUPTI's kernel records as the audit's cupti tracer keeps them (kernel_session_cupti.py), started."""
    from detrun.kernels.backends.kernel_session_cupti import CuptiKernels, cupti_python

    t = time.perf_counter()
    cupti = cupti_python()
    steps["import cupti"] = time.perf_counter() - t
    t = time.perf_counter()
    tracer = CuptiKernels(cupti)
    tracer.start()
    steps["kernel records enabled"] = time.perf_counter() - t
    return tracer


def _enable(tracer, kind, steps):
    t = time.perf_counter()
    tracer.cupti.activity_enable(getattr(tracer.cupti.ActivityKind, kind))
    steps[f"enable {kind}"] = time.perf_counter() - t


def _torch_session(torch, a, steps):
    from torch.profiler import ProfilerActivity, profile

    t = time.perf_counter()
    prof = profile(activities=[ProfilerActivity.CUDA])
    prof.__enter__()
    steps["torch profiler entered"] = time.perf_counter() - t
    _gemms(torch, a)
    t = time.perf_counter()
    prof.__exit__(None, None, None)
    names = [e.name for e in prof.events() if str(e.device_type).endswith("CUDA")]
    steps["torch profiler exited, read"] = time.perf_counter() - t
    return names


def child(way: str) -> dict:
    """One way's steps (seconds) in this process, and the kernel names its session saw."""
    steps = {}
    t = time.perf_counter()
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    _gemms(torch, a)
    steps["import torch, context, GEMM"] = time.perf_counter() - t
    got = {"way": way, "steps": steps}
    if way == "torch":
        names = _torch_session(torch, a, steps)
    else:
        tracer = _cupti_session(steps)
        for kind in KINETO_KINDS if way == "kinds" else ():
            _enable(tracer, kind, steps)
        _gemms(torch, a)
        t = time.perf_counter()
        tracer.stop()
        from detrun.kernels.backends.kernel_session_cupti import cupti_events

        names = [name for *_, name in cupti_events(tracer)]
        steps["stopped, names"] = time.perf_counter() - t
        if way == "kernel+torch":
            theirs = _torch_session(torch, a, steps)
            got["same names as torch"] = sorted(set(names)) == sorted(set(theirs))
            names = theirs
    return {**got, "kernels": len(names), "names": sorted(set(names))[:2]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2, choices=range(1, 11), metavar="1..10")
    ap.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    missing = [m for m in ("torch", "cupti") if importlib.util.find_spec(m) is None]
    if missing or not _cuda():
        need = ", ".join(missing) or "a CUDA device"
        print(f"cupti_start.py: needs CUDA and cupti-python; missing: {need}", file=sys.stderr)
        return 2
    failed = crashed = 0
    for r in range(args.rounds):
        for way in WAYS:
            p = subprocess.run([sys.executable, __file__, "--child", way], capture_output=True, text=True, timeout=120)
            if p.returncode:
                crashed += 1
                print(f"round {r} {way}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
                continue
            got = json.loads(p.stdout.strip().splitlines()[-1])
            steps = ", ".join(f"{k} {v:.3f}" for k, v in got["steps"].items())
            ok = "ok" if got["kernels"] >= 2 else "NO GEMM SEEN"
            failed += ok != "ok" or got.get("same names as torch") is False
            same = f"; same names as torch: {got['same names as torch']}" if "same names as torch" in got else ""
            print(f"round {r} {way}: {steps} (s); kernels {got['kernels']} {ok}{same} {got['names']}")
    return 3 if crashed else 1 if failed else 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
