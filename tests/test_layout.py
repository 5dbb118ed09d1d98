"""The import direction between detrun's parts (see detrun/__init__.py), checked two ways.

Static: every module under detrun/ is parsed with ast, and each `detrun.*` import it makes (absolute or
relative, at module level or inside a function) must be one its part may make (ALLOWED below).
Dynamic: importing the driver-side parts pulls in neither torch nor ray, and the kernels never pull in ray.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

from tests.helpers import ROOT

PACKAGE = ROOT / "detrun"

# The modules beside cli.py that every part shares; they import no part. A new flat module must be added
# here (or moved into a part): test_every_module_has_a_part fails until it is.
BASE = {"detrun", "detrun.errors", "detrun.exitpolicy", "detrun.stages", "detrun.signals", "detrun.envflags",
        "detrun.paths", "detrun.logs"}
PARTS = ("record", "spec", "kernels", "run", "store", "judge", "present", "api")

# part -> what its modules may import: a part (every module of it), "base", or one module by dotted name
# (under detrun.). A part may always import its own modules.
ALLOWED: Dict[str, Tuple[str, ...]] = {
    "base":    (),
    "record":  (),  # what a run writes and every part reads: it imports no other part, not even the base
    "spec":    ("base", "record"),
    "store":   ("base", "record"),
    "kernels": ("base", "record", "spec"),
    "judge":   ("base", "record", "spec", "store"),
    "present": ("base", "record", "spec", "store", "judge"),
    "run":     ("base", "record", "spec", "kernels", "store", "judge"),
    "api":     ("base", "record", "spec", "store", "judge", "present", "run"),  # detrun/api.py, the face
    # the CLI: the face (which re-exports the requests), the presenters, the errors and the exit policy
    "cli":     ("api", "present", "errors", "exitpolicy"),
}

# What runs inside a Ray task (detrun/run/__init__.py says so): the shard task and what it uses, and the modules
# both sides share. They never import the driver's modules (runner, submission, jobs, shrink, inline, ...) nor
# ray: the driver's runner.shard_task / cell_task (ray.remote) are the one seam, calling worker.run_shard.
IN_TASK = {"detrun.run.worker", "detrun.run.collector", "detrun.run.jitcache", "detrun.run.beside",
           "detrun.run.watchdog"}
SHARED_WITH_TASK = {"detrun.run.isolation", "detrun.run.resources", "detrun.run.faults"}

# Who may write to the terminal: the CLI's side. Every other module logs (detrun/logs.py).
MAY_PRINT = {"detrun.cli", "detrun.exitpolicy", "detrun.logs"}
MAY_PRINT_PARTS = ("present",)

NO_TORCH_NO_RAY = ("record", "spec", "store", "judge", "present", "api")  # and cli and the base modules


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def part_of(module: str) -> str:
    if module in BASE:
        return "base"
    if module == "detrun.cli":
        return "cli"
    top = module.split(".")[1] if module.count(".") >= 1 else ""
    if top in PARTS:
        return top
    raise AssertionError(f"{module} belongs to no part: add it to BASE in tests/test_layout.py or move it "
                         f"into one of {PARTS}")


def detrun_imports(module: str, path: Path, known: Dict[str, Path]) -> Iterator[Tuple[int, str]]:
    """(line, imported detrun module) for each detrun import in the file, anywhere in it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "detrun" or alias.name.startswith("detrun."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not (target == "detrun" or target.startswith("detrun.")):
                continue
            for alias in node.names:  # `from .run import runner` imports the module detrun.run.runner
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if sub in known else target


def allowed(part: str, target: str) -> bool:
    target_part = part_of(target)
    if target_part == part:
        return True
    for entry in ALLOWED[part]:
        if entry == "base" and target_part == "base":
            return True
        if entry in PARTS and target_part == entry:
            return True
        dotted = f"detrun.{entry}"
        if target == dotted or target.startswith(dotted + "."):
            return True
    return False


def test_every_module_has_a_part():
    for module in all_modules():
        part_of(module)


def test_imports_follow_the_allowed_edges():
    known = all_modules()
    bad: List[str] = []
    for module, path in known.items():
        part = part_of(module)
        for line, target in detrun_imports(module, path, known):
            if not allowed(part, target):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module} ({part}) imports {target} "
                           f"({part_of(target)}); {part} may import only {', '.join(ALLOWED[part]) or 'base modules'}")
    assert not bad, "imports against the layout:\n" + "\n".join(bad)


def test_the_checker_sees_relative_and_function_level_imports(tmp_path):
    """The static check itself: a relative import inside a function is resolved to its module."""
    fake = {"detrun.judge.x": PACKAGE / "judge" / "x.py", "detrun.run.runner": PACKAGE / "run" / "runner.py"}
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from ..run import runner\n    from ..store.runs import RunStore\n")
    found = list(detrun_imports("detrun.judge.x", path, fake))
    assert found == [(2, "detrun.run.runner"), (3, "detrun.store.runs")]
    assert not allowed("judge", "detrun.run.runner") and allowed("judge", "detrun.store.runs")
    assert not allowed("judge", "detrun.kernels.backends.flashinfer")
    assert not allowed("judge", "detrun.kernels.backends.plan_layouts")  # its vocabulary is the record's
    assert allowed("judge", "detrun.record.plans") and not allowed("record", "detrun.errors")
    assert allowed("cli", "detrun.api") and allowed("cli", "detrun.present.render") and allowed("cli", "detrun.errors")
    assert not allowed("cli", "detrun.run.submission") and not allowed("cli", "detrun.judge.requests")
    assert not allowed("cli", "detrun.stages") and not allowed("present", "detrun.api")


def _imported(modules: List[str]) -> List[str]:
    """Import modules in a fresh interpreter; which of torch, ray and flashinfer got imported."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        if exc.name not in ('triton', 'flashinfer'):\n"  # optional GPU extras, absent in CI
        "            raise\n"
        "print(json.dumps(sorted(k for k in ('torch', 'ray', 'flashinfer') if k in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_driver_side_parts_import_neither_torch_nor_ray():
    torch_free = [m for m in all_modules() if part_of(m) in NO_TORCH_NO_RAY + ("cli", "base")]
    if _imported(torch_free):  # then one at a time, so the message names the modules
        culprits = {m: _imported([m]) for m in torch_free}
        raise AssertionError("importing these pulls in torch/ray/flashinfer: "
                             + ", ".join(f"{m} ({', '.join(got)})" for m, got in culprits.items() if got))


def test_kernels_never_import_ray():
    kernels = [m for m in all_modules() if part_of(m) == "kernels"]
    assert "ray" not in _imported(kernels), f"one of {kernels} pulls in ray"


def _ray_imports(path: Path) -> List[int]:
    """Lines of the file that import ray (any module of it), anywhere in the file."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(n == "ray" or n.startswith("ray.") for n in names):
            lines.append(node.lineno)
    return lines


def test_in_task_code_imports_no_driver_module_and_no_ray():
    known = all_modules()
    task_side = IN_TASK | SHARED_WITH_TASK
    assert task_side <= set(known), f"renamed? {sorted(task_side - set(known))}"
    bad: List[str] = []
    for module in sorted(task_side):
        path = known[module]
        for line, target in detrun_imports(module, path, known):
            if target.startswith("detrun.run") and target not in task_side:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module} (in a task) imports the driver's {target}")
        bad += [f"{path.relative_to(ROOT)}:{line}: {module} (in a task) imports ray" for line in _ray_imports(path)]
    assert not bad, "\n".join(bad)


def test_the_task_check_sees_a_driver_import(tmp_path):
    known = all_modules()
    path = tmp_path / "w.py"
    path.write_text("def f():\n    from .runner import submit\n    from ray.util import placement_group\n")
    assert list(detrun_imports("detrun.run.worker", path, known)) == [(2, "detrun.run.runner")]
    assert _ray_imports(path) == [3]


def _terminal_writes(path: Path) -> List[int]:
    """Lines that call print() or name sys.stdout / sys.stderr."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")
              and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_library_logs_and_never_prints():
    bad: List[str] = []
    for module, path in all_modules().items():
        if module in MAY_PRINT or part_of(module) in MAY_PRINT_PARTS:
            continue
        bad += [f"{path.relative_to(ROOT)}:{line}: {module} writes to the terminal; log through "
                f"logging.getLogger(__name__) instead" for line in _terminal_writes(path)]
    assert not bad, "\n".join(bad)


def test_the_print_check_sees_print_and_sys_stderr(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import sys\nprint('x')\nsys.stderr.write('y')\nlog = 1\n")
    assert _terminal_writes(path) == [2, 3]


def test_detrun_messages_reach_stderr_as_their_text_alone(capsys):
    import logging

    import detrun  # noqa: F401  (installs the handler)

    logging.getLogger("detrun.run.jitcache").warning("detrun: jit cache: %s", "skipped x")
    logging.getLogger("detrun.run.runner").info("a note")
    captured = capsys.readouterr()
    assert captured.err == "detrun: jit cache: skipped x\na note\n" and captured.out == ""
