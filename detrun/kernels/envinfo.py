"""The environment fingerprint a task records in every row: host, GPU, driver, CUDA, versions, flags."""

from __future__ import annotations

import json
import platform
import socket
import subprocess
from typing import Dict

import torch

from ..record.fingerprint import fingerprint_of
from ..spec.versions import installed_version


def installed_sglang() -> str:
    """The installed SGLang's version ("" when none), read without importing it (the import takes 20-30 s)."""
    return installed_version("sglang")


def check_sglang(spec) -> str:
    """The installed SGLang's version when it is the one the job names; else SGLangVersionMismatch (an
    environment error: exit 2). The task checks it before anything else; backend sglang again when built."""
    from .backends.base import SGLangVersionMismatch

    want = spec.sglang.version if spec.sglang is not None else "?"
    have = installed_sglang()
    if have != want:
        found = f"SGLang {have} is installed" if have else "no SGLang is installed"
        raise SGLangVersionMismatch(f"backend sglang: the job names SGLang {want} but {found} in the task's "
                                    "environment")
    return have


def version_name(spec) -> str:
    """The rows' `version`: the name of the one versions: environment a task's spec has ("" without)."""
    from ..spec.versions import environments

    envs = environments(spec)
    return envs[0].name if len(envs) == 1 else ""


def check_version(spec) -> str:
    """The job's versions: environment this task runs in ("" without versions:), when the installed distribution
    is that version (Ray's runtime_env installed it first on sys.path: what an import loads); else
    VersionMismatch (an environment error: exit 2, no rows of another version)."""
    from ..spec.versions import environments
    from .backends.base import VersionMismatch

    envs = environments(spec)
    if not envs:
        return ""
    if len(envs) > 1:
        raise VersionMismatch(f"versions: a task runs one environment, the spec names {len(envs)} "
                              f"({', '.join(e.name for e in envs)})")
    env = envs[0]
    have = installed_version(env.distribution)
    if have != env.version:
        raise VersionMismatch(f"versions: the task's environment {env.name} has {env.found(have)} installed "
                              "(its Ray runtime_env did not install it)")
    return env.name


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def environment(device: torch.device, flags: Dict[str, str], sglang: str = "") -> Dict[str, object]:
    """The row's environment fields (flags: the task's TaskFlags.flags); sglang: the SGLang version a backend-sglang
    task runs ("" otherwise: the other backends run none of its code, so an installed SGLang changes no fingerprint
    of theirs)."""
    env: Dict[str, object] = {
        "sglang": sglang,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # a TorchVersion would make the driver import torch
        "flashinfer": installed_version("flashinfer-python"),
        "ray": installed_version("ray"),
        "cuda": torch.version.cuda or "",
        "flags": json.dumps(flags, sort_keys=True),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu_name=props.name, gpu_uuid=str(getattr(props, "uuid", "")),
                   sm_count=props.multi_processor_count, driver=_driver())
    else:
        env.update(gpu_name=f"cpu:{platform.machine()}", gpu_uuid="", sm_count=0, driver="")
    env["fingerprint"] = fingerprint_of(env)
    return env
