"""FlashInfer's compiled modules shared through the runs root, so a fresh GPU machine loads, not compiles.

FlashInfer (0.6.7.post3, flashinfer/jit/core.py) builds a module on first use into
<FLASHINFER_WORKSPACE_BASE>/.cache/flashinfer/<version>/<arch>/cached_ops/<module>/<module>.so with ninja
(~36 s FA2, ~90 s FA3 on an H200). Every later load runs ninja again, which rebuilds unless its logs
(.ninja_log, .ninja_deps) say the objects are newer than every input, the package's headers included;
on a new machine those headers were just installed, so a copied cached_ops/ is compiled again. A module
found at <AOT dir>/<module>/<module>.so (JitSpec.is_aot, the directory flashinfer-jit-cache fills) is
loaded with no ninja at all. So a task, before its first plan, copies the cache's modules for its key
into <workspace>/detrun-jit/<cuda>/ and points FlashInfer's AOT directory there (the packaged AOT
modules, if any, are linked in); after its shard it stores the modules in cached_ops/ the cache lacks.

    <runs root>/jit-cache/<flashinfer>/<cuda>/<arch>/<module>.tar   entry.json and module.so

An entry is written whole or not at all (RunStore.put), the same bytes by any writer. One that is
unreadable, altered or made for another key is skipped with a line on stderr: FlashInfer compiles, and
the task stores its module in the entry's place. No error of the cache fails a task.
Imports neither torch nor ray; flashinfer only inside the task's calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import io
import json
import logging
import os
import posixpath
import re
import tarfile
import time
from pathlib import Path
from typing import Dict, Optional

from ..errors import first_line
from ..stages import JIT_RESTORE as RESTORE
from ..stages import JIT_SAVE as SAVE
from ..stages import Stages

log = logging.getLogger(__name__)

CONTEXT_KEY = "jit_cache"  # the task context's runs root for the cache (runner.RunOptions.jit_cache)
FOLDER = "jit-cache"
META, LIBRARY = "entry.json", "module.so"  # an entry's two members
LOCAL = "detrun-jit"  # under FlashInfer's workspace directory: the restored modules, its AOT directory then


@dataclasses.dataclass(frozen=True)
class JitKey:
    """What a compiled module is valid for, besides its name (which holds dtype, head_dim, backend...)."""

    flashinfer: str
    cuda: str
    arch: str  # FlashInfer's target archs as its workspace path names them, e.g. 90a

    def folder(self) -> str:
        return posixpath.join(FOLDER, *map(_part, dataclasses.astuple(self)))


def _part(name: str) -> str:
    """A key's part as one folder name."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name) or "_"


def cache_root(store) -> str:
    """The runs root as a task sees it: a local root as an absolute path, a URI as given."""
    return store.base if store.local else store.root


def pack(key: JitKey, module: str, library: bytes) -> bytes:
    """An entry: the same bytes for the same module and key (no times, owners or modes of the writer)."""
    meta = {"key": dataclasses.asdict(key), "module": module, "sha256": hashlib.sha256(library).hexdigest(),
            "bytes": len(library)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in ((META, json.dumps(meta, sort_keys=True).encode()), (LIBRARY, library)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack(key: JitKey, module: str, entry: bytes) -> bytes:
    """The module's library from an entry; ValueError saying why the entry cannot be used."""
    try:
        with tarfile.open(fileobj=io.BytesIO(entry), mode="r:") as tar:
            members = {m.name: m for m in tar.getmembers()}
            if set(members) != {META, LIBRARY} or not all(m.isfile() for m in members.values()):
                raise ValueError(f"not an entry (members: {', '.join(sorted(members)) or 'none'})")
            meta = json.loads(_read(tar, members[META]))
            library = _read(tar, members[LIBRARY])
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable ({exc or type(exc).__name__})") from None
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("key") != dataclasses.asdict(key) or meta.get("module") != module:
        raise ValueError(f"foreign: made for {meta.get('module')} with {meta.get('key')}")
    if hashlib.sha256(library).hexdigest() != meta.get("sha256") or not library.startswith(b"\x7fELF"):
        raise ValueError(f"corrupt: {len(library)} bytes that are not the library recorded ({meta.get('bytes')} bytes)")
    return library


def _warn(message: str) -> None:
    log.warning("detrun: jit cache: %s", message)


def current_key(env) -> JitKey:
    """This task's key: flashinfer's version, its CUDA (nvcc, as FlashInfer reads it), its target archs."""
    import flashinfer

    try:
        cuda = str(importlib.import_module("flashinfer.jit.cpp_ext").get_cuda_version())
    except Exception:  # no nvcc: what torch was built with
        import torch

        cuda = str(torch.version.cuda or "none")
    return JitKey(str(flashinfer.__version__), cuda, Path(env.FLASHINFER_WORKSPACE_DIR).name)


def _write_file(path: Path, data: bytes) -> None:
    """Whole or not at all: tasks of one machine restore the same module at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _built(jit_dir: Path, module: str) -> Optional[bytes]:
    """A module's library in cached_ops/, read under FlashInfer's build lock; None while one builds it."""
    library = jit_dir / module / f"{module}.so"
    try:
        from filelock import FileLock, Timeout
    except ImportError:  # flashinfer depends on filelock; without it, read as is
        return library.read_bytes()
    (jit_dir / "tmp").mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(jit_dir / "tmp" / f"{module}.lock"), timeout=0):
            return library.read_bytes()
    except Timeout:
        return None


class JitCache:
    """One task's use of the cache: restore() before its first plan, save() after its shard. Never raises."""

    def __init__(self, root: Optional[str], stages: Stages):
        self.root, self.stages = root, stages
        self.key: Optional[JitKey] = None  # set by a restore that reached the cache; save() needs it
        self.unusable: set = set()  # entries restore skipped: save() replaces them
        self.record: Dict[str, float] = {}  # what moved, for the task's timings (summary_line)

    def restore(self) -> None:
        if not self.root:
            return
        start, moved = time.perf_counter(), 0
        try:
            moved = self._restore()
        except Exception as exc:  # storage, an unexpected flashinfer: the task compiles instead
            self.key = None
            _warn(f"nothing restored from {self.root} ({first_line(exc, limit=300)})")
        seconds = time.perf_counter() - start
        self.stages.add(RESTORE, seconds, moved)
        self.record.update(restored=moved, restore_s=round(seconds, 3))

    def _restore(self) -> int:
        from ..store.runs import RunStore

        self.env = env = importlib.import_module("flashinfer.jit.env")
        self.jit_dir = Path(env.FLASHINFER_JIT_DIR)
        self.store, key = RunStore(str(self.root)), current_key(env)  # restore() returned without a root
        folder, local = key.folder(), Path(env.FLASHINFER_WORKSPACE_DIR) / LOCAL / _part(key.cuda)
        self.key = key
        restored, size = 0, 0
        for name in self.store.list_names(folder, ".tar"):
            module = name[: -len(".tar")]
            target = local / module / f"{module}.so"
            if target.exists() or (self.jit_dir / module / f"{module}.so").exists():
                continue  # restored or compiled on this machine before
            where = self.store.where(folder, name)
            try:
                library = unpack(key, module, self.store.get(posixpath.join(folder, name)))
            except ValueError as exc:
                _warn(f"skipped {where}: {exc}")
                self.unusable.add(name)
                continue
            _write_file(target, library)
            restored, size = restored + 1, size + len(library)
        if local.is_dir() and any(local.glob("*/*.so")):
            self._point_aot(local)
        self.record.update(restored_mb=round(size / 2**20, 1), skipped=len(self.unusable))
        return restored

    def _point_aot(self, local: Path) -> None:
        """FlashInfer's AOT directory becomes `local`, with the modules of the packaged one linked in."""
        packaged = Path(self.env.FLASHINFER_AOT_DIR)
        if packaged.resolve() == local.resolve():
            return
        if packaged.is_dir():
            for entry in packaged.iterdir():
                if not os.path.lexists(local / entry.name):
                    (local / entry.name).symlink_to(entry.resolve())
        self.env.FLASHINFER_AOT_DIR = local  # type: ignore[attr-defined]

    def save(self) -> None:
        """Store the modules in cached_ops/ (compiled by this task, or on its machine before) that the cache
        lacks or holds unusable."""
        if self.key is None:
            return
        start, saved, size = time.perf_counter(), 0, 0
        try:
            folder = self.key.folder()
            # What other tasks stored meanwhile counts; what restore could not use is replaced.
            have = set(self.store.list_names(folder, ".tar")) - self.unusable
            for library in sorted(self.jit_dir.glob("*/*.so")):
                module = library.parent.name
                if library.name != f"{module}.so" or f"{module}.tar" in have:
                    continue
                data = _built(self.jit_dir, module)
                if data is None or not data.startswith(b"\x7fELF"):
                    continue  # being built, or not a library
                self.store.put(posixpath.join(folder, f"{module}.tar"), pack(self.key, module, data))
                saved, size = saved + 1, size + len(data)
        except Exception as exc:
            _warn(f"not saved to {self.root} ({first_line(exc, limit=300)})")
        seconds = time.perf_counter() - start
        self.stages.add(SAVE, seconds, saved)
        self.record.update(saved=saved, saved_mb=round(size / 2**20, 1), save_s=round(seconds, 3))


def summary_line(shard_timings: Dict[str, dict]) -> Optional[str]:
    """`jit cache: restored N modules (X MB, Y s), saved N (X MB, Y s)` over a run's tasks; None if unused."""
    records = [t["jit_cache"] for t in shard_timings.values() if t.get("jit_cache")]
    if not records:
        return None
    total = {k: sum(r.get(k, 0) for r in records) for k in
             ("restored", "restored_mb", "restore_s", "skipped", "saved", "saved_mb", "save_s")}
    line = (f"jit cache ({len(records)} tasks): restored {total['restored']:g} modules "
            f"({total['restored_mb']:.1f} MB, {total['restore_s']:.2f} s), "
            f"saved {total['saved']:g} ({total['saved_mb']:.1f} MB, {total['save_s']:.2f} s)")
    return line + (f"; {total['skipped']:g} entries skipped (unreadable or foreign)" if total["skipped"] else "")


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A regular file member's bytes (the caller checked it is a file)."""
    f = tar.extractfile(member)
    if f is None:
        raise ValueError(f"{member.name}: not a regular file")
    return f.read()
