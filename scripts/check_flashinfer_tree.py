"""Check a (stripped) flashinfer tree on a CPU, compiling nothing: it imports at the expected version with
the wrappers detrun calls, and the JIT specs of the modules detrun builds (FA2 batch prefill and its
independent-stride paged module, FA3 batch prefill, CUDA-core batch decode, cascade for merge_state)
generate their sources and build.ninja with every source and include dir present. With --nvcc, every
header those sources include must resolve too (nvcc -M over each source, as the JIT's ninja would call it).

    python3 scripts/check_flashinfer_tree.py SITE --version 0.7.2.post1 [--nvcc CUDA_HOME/bin/nvcc]

SITE holds flashinfer and a tvm_ffi this interpreter imports (and tqdm, pynvml where the machine lacks them);
torch must import. The nvcc's CUDA home needs the runtime, crt, cccl and curand headers (FA3 includes
curand_kernel.h through cutlass/util).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _specs():
    import torch
    from flashinfer.jit import cascade
    from flashinfer.jit.attention import modules as m

    args = (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 128, 128, 0, False, False, False)
    fa2 = getattr(m, "_gen_batch_prefill_primary_module", m.gen_batch_prefill_module)  # 0.7: primary + lazy
    specs = [fa2("fa2", *args), m.gen_batch_prefill_module("fa3", *args), m.gen_batch_decode_module(*args[:-1]),
             cascade.gen_cascade_module()]
    if hasattr(m, "_gen_batch_prefill_independent_paged_module"):  # paged k/v caches of different strides
        specs.append(m._gen_batch_prefill_independent_paged_module("fa2", *args))
    return specs


def _ninja_commands(ninja: Path, cuda_home: str):
    """(source, nvcc -M / c++ -M command) for each compile in one build.ninja."""
    text = ninja.read_text().replace("$\n", " ")
    var = dict(re.findall(r"^(\w+) = (.*)$", text, re.M))
    var["cuda_home"] = cuda_home

    def expand(s: str) -> str:
        for _ in range(4):
            s = re.sub(r"\$(\w+)", lambda x: var.get(x.group(1), ""), s)
        return s

    for rule, src in re.findall(r"^build \S+: (cuda_compile|compile) (\S+)$", text, re.M):
        if rule == "cuda_compile":
            yield src, [f"{cuda_home}/bin/nvcc", "-M", *shlex.split(expand(var["cuda_cflags"])), src]
        else:
            yield src, [var.get("cxx", "c++"), "-M", *shlex.split(expand(var["cflags"])), src]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("site")
    ap.add_argument("--version", required=True)
    ap.add_argument("--nvcc", default="")
    opts = ap.parse_args()
    site = Path(opts.site).resolve()
    work = tempfile.mkdtemp(prefix="fi-check-")  # the JIT's generated sources and ninja files
    os.environ.update(FLASHINFER_WORKSPACE_BASE=work, FLASHINFER_CUDA_ARCH_LIST="9.0")
    try:
        return _check(site, opts)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check(site: Path, opts) -> int:
    sys.path.insert(0, str(site))
    import flashinfer  # noqa: E402
    from flashinfer import (  # noqa: F401
        BatchDecodeWithPagedKVCacheWrapper,
        BatchPrefillWithPagedKVCacheWrapper,
        BatchPrefillWithRaggedKVCacheWrapper,
        merge_state,
    )

    problems = []
    if Path(flashinfer.__file__).resolve().parent != site / "flashinfer" or flashinfer.__version__ != opts.version:
        problems.append(f"imported flashinfer {flashinfer.__version__} from {flashinfer.__file__}")
    commands = []
    for spec in _specs():
        spec.write_ninja()  # generates the .cu sources from the templates and the ninja file; compiles nothing
        missing = [str(p) for p in spec.sources if not Path(p).is_file()]
        dirs = re.findall(r"(?:-I|-isystem )(\S+)", spec.ninja_path.read_text())
        missing += [d for d in dirs if d.startswith(str(site)) and not Path(d).is_dir()]
        problems += [f"{spec.name}: missing {p}" for p in missing]
        print(f"{spec.name}: {len(spec.sources)} sources, {len(dirs)} include dirs, {len(missing)} missing")
        if opts.nvcc:
            commands += list(_ninja_commands(spec.ninja_path, str(Path(opts.nvcc).resolve().parent.parent)))
    if commands:
        def scan(job):
            src, cmd = job
            done = subprocess.run(cmd, capture_output=True, text=True)
            return src, done.returncode, done.stdout, done.stderr

        headers = set()
        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            for src, rc, out, err in pool.map(scan, commands):
                if rc:
                    problems.append(f"nvcc -M {Path(src).name}: {err.strip().splitlines()[-1] if err.strip() else rc}")
                headers |= {t for t in out.replace("\\\n", " ").split() if t.startswith(str(site))}
        print(f"nvcc -M: {len(commands)} sources, {len(headers)} files of the tree included")
    print(f"flashinfer {flashinfer.__version__} at {site}: " + ("OK" if not problems else "PROBLEMS"))
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
