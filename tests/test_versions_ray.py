"""A job with versions: through a real Ray runtime_env: two real SGLang releases installed by Ray's pip from a
local wheelhouse (--no-index), one run each, compared together; a version pip cannot install is one error
naming it (exit 2).

Needs the wheels in .wheelhouse/ (.ci/run downloads them; README, "Run the tests"):
    python3 -m pip download --no-deps sglang==0.5.11 -d .wheelhouse && \\
    python3 -m pip download --no-deps sglang==0.5.23 -d .wheelhouse
Without CI=true a machine without them skips this file; under CI their absence fails it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from detrun.cli import app
from detrun.store.runs import RunStore
from tests.helpers import ROOT, TINY, one_line, small

WHEELHOUSE = ROOT / ".wheelhouse"
RELEASES = ["0.5.11", "0.5.23"]
HAVE = all(any(WHEELHOUSE.glob(f"sglang-{v}-*.whl")) for v in RELEASES)
if not HAVE and not os.environ.get("CI"):
    pytest.skip("python3 -m pip download --no-deps sglang==0.5.11 -d .wheelhouse (and 0.5.23)",
                allow_module_level=True)

pytestmark = pytest.mark.slow  # Ray's pip builds a virtualenv per version (~15-25 s on 2 cores)


def job(folder: Path, releases, wheelhouse) -> str:
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(small(**TINY, versions={"sglang": releases, "wheelhouse": str(wheelhouse)})))
    return str(path)


def test_each_version_is_a_run_in_its_own_runtime_env(ray_2gpu, tmp_path):
    assert HAVE, f"no sglang {' and '.join(RELEASES)} wheels in {WHEELHOUSE} (see this file's docstring)"
    root = str(tmp_path / "runs")
    out = CliRunner().invoke(app, ["submit", job(tmp_path, RELEASES, WHEELHOUSE), "--gpus", "1", "--run-id", "v",
                                   "--runs-root", root])
    assert out.exit_code == 0 and "REPRODUCIBLE" in out.output, out.output
    store = RunStore(root)
    runs = [f"v-sglang-{v}" for v in RELEASES]
    assert [line.split()[1].rstrip(":") for line in out.output.splitlines() if line.startswith("run v-")] == runs
    for run, release in zip(runs, RELEASES):
        rows = store.read_rows([run]).to_pylist()
        # the task read the version its runtime_env's virtualenv imports; this machine's own SGLang (if any) is
        # one version at most, so at least one run's rows come from Ray's install
        assert rows and {r["version"] for r in rows} == {f"sglang=={release}"}
        manifest = store.manifest(run)
        assert manifest["spec"]["versions"]["sglang"] == [release]  # each run's spec: its environment alone
        env = manifest["environment"]
        assert env["name"] == f"sglang=={release}" and env["requirements"] == [f"sglang=={release}"]
        assert "--no-index" in env["pip_options"] and env["setup_s"] > 0
    print(json.dumps({r: store.manifest(r)["environment"]["setup_s"] for r in runs}))  # -s: the build times


def test_a_version_pip_cannot_install_in_ray_is_one_error_naming_it(ray_2gpu, tmp_path):
    home = tmp_path / "wheels"
    home.mkdir()
    (home / "sglang-0.5.99-py3-none-any.whl").write_bytes(b"not a zip")  # passes the look before Ray; pip fails
    root = str(tmp_path / "runs")
    out = CliRunner().invoke(app, ["submit", job(tmp_path, ["0.5.99"], home), "--gpus", "1", "--runs-root", root])
    assert out.exit_code == 2, out.output
    line = one_line(out.stderr)
    assert line.startswith("detrun: error: versions: sglang==0.5.99 cannot be installed: ERROR: Wheel "), line
    assert not RunStore(root).has_run("v") and not list(Path(root).glob("small-*"))  # no run of any version
