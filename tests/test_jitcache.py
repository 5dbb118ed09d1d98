"""The FlashInfer JIT cache under the runs root (detrun/run/jitcache.py), against a stand-in flashinfer whose
workspace has FlashInfer's layout: a module compiled on one machine is stored, and a wiped machine gets
the same bytes where FlashInfer's is_aot looks (so it loads instead of compiling); another version,
CUDA or arch gets nothing; a damaged or foreign entry is skipped with a line, never a failure; the
worker restores before it builds the backend and saves what its shard compiled."""

import os
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from detrun.run import jitcache, worker
from detrun.run.jitcache import JitCache, JitKey, pack
from detrun.spec.matrix import Shard
from detrun.stages import JIT_RESTORE, JIT_SAVE, Stages
from detrun.store.runs import RunStore
from tests.helpers import JOBS, small

MODULE = "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_head_dim_qk_128_posenc_0"


def fake_flashinfer(monkeypatch, base: Path, version="0.6.7.post3", cuda="12.9", arch="90a"):
    """sys.modules' flashinfer with FlashInfer's paths (flashinfer/jit/env.py) under base."""
    workspace = base / ".cache" / "flashinfer" / version / arch
    env = types.SimpleNamespace(FLASHINFER_WORKSPACE_DIR=workspace, FLASHINFER_JIT_DIR=workspace / "cached_ops",
                                FLASHINFER_AOT_DIR=base / "site" / "flashinfer" / "data" / "aot")
    cpp_ext = types.SimpleNamespace(get_cuda_version=lambda: cuda)
    jit = types.SimpleNamespace(env=env, cpp_ext=cpp_ext)
    for name, module in (("flashinfer", types.SimpleNamespace(__version__=version, jit=jit)),
                         ("flashinfer.jit", jit), ("flashinfer.jit.env", env), ("flashinfer.jit.cpp_ext", cpp_ext)):
        monkeypatch.setitem(sys.modules, name, module)
    return env


def compile_module(env, name=MODULE, payload=b"kernels") -> bytes:
    """What FlashInfer's ninja leaves in cached_ops/<name>/: build files, objects, the library."""
    library = b"\x7fELF" + payload * 1000 + os.urandom(16)
    build = Path(env.FLASHINFER_JIT_DIR) / name
    build.mkdir(parents=True, exist_ok=True)
    (build / "build.ninja").write_text("ninja_required_version = 1.3\n")
    (build / "batch_prefill.cuda.o").write_bytes(b"object")
    (build / f"{name}.so").write_bytes(library)
    return library


def loaded(env, name=MODULE):
    """FlashInfer's rule (jit/core.py JitSpec.build_and_load): the AOT directory's library if it exists
    (is_aot: loaded, no ninja); else ninja builds cached_ops/ (None here: it would compile)."""
    aot = Path(env.FLASHINFER_AOT_DIR) / name / f"{name}.so"
    return aot.read_bytes() if aot.exists() else None


def restore(root: str) -> JitCache:
    cache = JitCache(root, Stages())
    cache.restore()
    return cache


def save(root: str) -> JitCache:
    cache = restore(root)
    cache.save()
    return cache


def test_save_wipe_restore_round_trips_the_library(tmp_path, monkeypatch, any_root):
    root = any_root  # a local runs root, then an s3:// one
    env = fake_flashinfer(monkeypatch, tmp_path / "machine1")
    library = compile_module(env)
    first = save(root)
    assert first.record["saved"] == 1 and first.stages.counts[JIT_SAVE] == 1
    assert RunStore(root).list_names("jit-cache/0.6.7.post3/12.9/90a", ".tar") == [f"{MODULE}.tar"]
    assert save(root).record["saved"] == 0  # in the cache already

    env = fake_flashinfer(monkeypatch, tmp_path / "machine2")  # a fresh machine: empty workspace
    packaged = Path(env.FLASHINFER_AOT_DIR) / "packaged_module"
    packaged.mkdir(parents=True)
    (packaged / "packaged_module.so").write_bytes(b"\x7fELF packaged")
    assert loaded(env) is None
    cache = restore(root)
    assert loaded(env) == library  # FlashInfer loads it: no compile
    assert loaded(env, "packaged_module") == b"\x7fELF packaged"  # the packaged AOT modules still load
    assert cache.record["restored"] == 1 and cache.stages.counts[JIT_RESTORE] == 1
    assert cache.record["restored_mb"] == round(len(library) / 2**20, 1)
    assert Path(env.FLASHINFER_AOT_DIR).is_relative_to(env.FLASHINFER_WORKSPACE_DIR)
    cache.save()
    assert cache.record["saved"] == 0  # a restored module is not stored again


@pytest.mark.parametrize("other", [dict(arch="100a"), dict(version="0.7.0"), dict(cuda="13.0")])
def test_another_arch_version_or_cuda_gets_nothing(tmp_path, monkeypatch, other):
    root = str(tmp_path / "runs")
    compile_module(fake_flashinfer(monkeypatch, tmp_path / "built"))
    save(root)
    env = fake_flashinfer(monkeypatch, tmp_path / "other", **other)
    aot = env.FLASHINFER_AOT_DIR
    cache = restore(root)
    assert cache.record["restored"] == 0 and loaded(env) is None and env.FLASHINFER_AOT_DIR == aot
    compile_module(env)
    cache.save()  # its own key's entry, beside the other
    assert cache.record["saved"] == 1 and len(list((tmp_path / "runs/jit-cache").rglob("*.tar"))) == 2


def _truncated(entry: bytes, key: JitKey) -> bytes:
    return entry[: len(entry) // 2]


def _flipped(entry: bytes, key: JitKey) -> bytes:
    at = entry.index(b"kernels")
    return entry[:at] + b"K" + entry[at + 1:]


def _foreign(entry: bytes, key: JitKey) -> bytes:  # a copy of another arch's entry under this key
    return pack(JitKey(key.flashinfer, key.cuda, "100a"), MODULE, b"\x7fELF other")


def _not_a_tar(entry: bytes, key: JitKey) -> bytes:
    return b"<html>503 Service Unavailable</html>"


@pytest.mark.parametrize("damage,why", [(_truncated, "unreadable"), (_flipped, "corrupt"), (_foreign, "foreign"),
                                        (_not_a_tar, "unreadable")])
def test_a_damaged_or_foreign_entry_is_skipped_with_a_line(tmp_path, monkeypatch, capsys, damage, why):
    root = str(tmp_path / "runs")
    library = compile_module(fake_flashinfer(monkeypatch, tmp_path / "built"))
    key = save(root).key
    path = tmp_path / "runs" / key.folder() / f"{MODULE}.tar"
    path.write_bytes(damage(path.read_bytes(), key))
    env = fake_flashinfer(monkeypatch, tmp_path / "fresh")
    cache = restore(root)
    assert cache.record["restored"] == 0 and cache.record["skipped"] == 1 and loaded(env) is None
    line = capsys.readouterr().err
    assert f"detrun: jit cache: skipped {path}: {why}" in line
    compiled = compile_module(env)  # FlashInfer compiles instead, and the task stores it in the entry's place
    cache.save()
    assert cache.record["saved"] == 1 and path.read_bytes() == pack(key, MODULE, compiled) != pack(key, MODULE, library)


def test_a_cache_that_cannot_be_written_does_not_fail_the_task(tmp_path, monkeypatch, capsys):
    root = tmp_path / "runs"
    root.write_text("a file, not a directory")
    compile_module(fake_flashinfer(monkeypatch, tmp_path / "m"))
    cache = save(str(root))
    assert cache.record["saved"] == 0 and "detrun: jit cache: not saved to" in capsys.readouterr().err


def as_flashinfer_task(monkeypatch, at_build=lambda: None):
    """The worker believes its backend is flashinfer (the restore runs) and builds the reference one,
    calling at_build where the FlashInfer backend would be built (its first plan loads the modules)."""
    from detrun.kernels.backends.reference import ReferenceBackend

    def make_backend(name, spec, device, stages, flags=None):
        at_build()
        return ReferenceBackend(spec, device, stages, flags)

    monkeypatch.setattr(worker, "resolve_backend", lambda spec, has_cuda, load: ("flashinfer", ""))
    monkeypatch.setattr(worker, "make_backend", make_backend)


def test_the_worker_restores_before_the_backend_and_saves_after_the_shard(tmp_path, monkeypatch):
    root = str(tmp_path / "runs")
    library = compile_module(fake_flashinfer(monkeypatch, tmp_path / "machine1"))
    save(root)
    env = fake_flashinfer(monkeypatch, tmp_path / "machine2")
    seen = []

    def at_build():
        seen.append(loaded(env))
        compile_module(env, name="cascade_merge_state", payload=b"merge")  # a module the cache lacks

    as_flashinfer_task(monkeypatch, at_build)
    out = worker.run_shard(small(modes=["eager"], repeats=1), Shard(0, (0,)), "r",
                           {"node_id": "n1", jitcache.CONTEXT_KEY: root})
    assert seen == [library]
    assert {r["node_id"] for r in out["rows"]} == {"n1"} and all(r["status"] == "ok" for r in out["rows"])
    stages, record = out["timings"]["stages"], out["timings"]["jit_cache"]
    assert stages[JIT_RESTORE]["n"] == 1 and stages[JIT_SAVE]["n"] == 1
    assert record["restored"] == 1 and record["saved"] == 1
    assert (tmp_path / "runs/jit-cache/0.6.7.post3/12.9/90a/cascade_merge_state.tar").is_file()
    memory = out["timings"]["memory"]
    assert memory["host_peak_mb"] > 10 and "device_reserved_peak_mb" not in memory
    line = jitcache.summary_line({"g0-r0": out["timings"]})
    assert line.startswith("jit cache (1 tasks): restored 1 modules (") and ", saved 1 (" in line


def test_without_the_context_the_cache_is_not_used(tmp_path, monkeypatch):
    compile_module(fake_flashinfer(monkeypatch, tmp_path / "m"))
    as_flashinfer_task(monkeypatch)
    out = worker.run_shard(small(modes=["eager"], repeats=1), Shard(0, (0,)), "r")
    assert out["timings"]["jit_cache"] == {} and jitcache.summary_line({"g0": out["timings"]}) is None
    assert JIT_RESTORE not in out["timings"]["stages"] and JIT_SAVE not in out["timings"]["stages"]


@pytest.mark.parametrize("flag,expected", [([], True), (["--no-jit-cache"], False), (["--jit-cache"], True)])
def test_submit_passes_the_runs_root_to_the_tasks_unless_no_jit_cache(tmp_path, monkeypatch, flag, expected):
    from detrun import cli
    from detrun.run import runner

    got = {}

    def submit(spec, store, gpus, spec_path, run_id, options, manifest_extra):
        got["jit_cache"] = options.jit_cache
        return runner.SubmitResult(run_id, gpus)

    monkeypatch.setattr(runner, "connect", lambda *a: 1)
    monkeypatch.setattr(runner, "submit", submit)
    monkeypatch.setattr(cli, "_compare_and_print", lambda *a: 0)
    root = tmp_path / "runs"
    result = CliRunner().invoke(cli.app, ["submit", os.path.join(JOBS, "paged.yaml"), "--runs-root", str(root), *flag])
    assert result.exit_code == 0, result.output
    assert got["jit_cache"] == (str(root) if expected else None)


def test_the_cache_folder_is_no_run_id(tmp_path):
    from detrun.errors import DetrunError

    with pytest.raises(DetrunError, match="keeps its own jit-cache/ folder"):
        RunStore(str(tmp_path)).create_run("jit-cache", {}, 1)


def test_detrun_timings_shows_restore_within_backend_init_and_save_beside_the_stages():
    from detrun.stages import breakdown

    shard = {"stages": {"backend init": {"s": 3.0, "n": 1}, "import flashinfer": {"s": 1.0, "n": 1},
                        JIT_RESTORE: {"s": 1.5, "n": 2}, JIT_SAVE: {"s": 0.5, "n": 1}}, "run_s": 4.0}
    got = {name: (s, n) for name, s, n in breakdown({}, {"g0": shard})}
    assert got[JIT_RESTORE] == (1.5, 2) and got["backend init (rest)"] == (0.5, 1) and got[JIT_SAVE] == (0.5, 1)
    assert got["task (rest: rows, hooks)"] == (0.5, 1)  # 4.0 - backend init 3.0 - save 0.5
