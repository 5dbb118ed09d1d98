"""detrun bisect for real: two real SGLang releases installed by Ray's pip from the local wheelhouse (--no-index),
each version a real submit of the job pinned to it, judged by its claims and (version: bitwise) beside the first
version's run; a version pip cannot install stops the bisect naming it (exit 2), never called broken.

The job runs the reference backend, whose bits no SGLang release changes: both versions hold, so the range does
not bracket a break (exit 2, both verdicts printed) and, with --no-expect-break, exits 0. A located break, what
changed there and the job written are tested with injected probes over stored runs (tests/test_bisect.py): no
CPU job through the task path runs SGLang's own backend (it needs FlashInfer's wrappers), so no real release
changes a CPU row.

Needs the wheels in .wheelhouse/ that tests/test_versions_ray.py needs (python3 -m pip download --no-deps
sglang==0.5.11 -d .wheelhouse, and 0.5.23); without CI=true a machine without them skips both files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from detrun.store.runs import RunStore
from tests.helpers import TINY, cli_main, small
from tests.test_versions_ray import HAVE, RELEASES, WHEELHOUSE  # its wheels (it skips, and so this file, without)

pytestmark = pytest.mark.slow  # Ray's pip builds a virtualenv per version (~15-25 s each on 2 cores)


def job(folder: Path, releases, wheelhouse) -> str:
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(small(**TINY, expect={"version": "bitwise"},
                                         versions={"sglang": releases, "wheelhouse": str(wheelhouse)})))
    return str(path)


def test_real_versions_that_both_hold_do_not_bracket_a_break(ray_2gpu, tmp_path, capsys):
    assert HAVE, f"no sglang {' and '.join(RELEASES)} wheels in {WHEELHOUSE} (see this file's docstring)"
    root, out = str(tmp_path / "runs"), tmp_path / "bisected.yaml"
    args = ["bisect", job(tmp_path, RELEASES, WHEELHOUSE), "--gpus", "1", "--runs-root", root, "-o", str(out)]
    code, text, err = cli_main(capsys, *args, "--format", "json")
    assert code == 2, err
    doc = json.loads(text)
    assert doc["outcome"] == ("the range does not bracket a break: both held: nothing broke by sglang==0.5.23")
    probes = doc["probes"]
    assert [(p["version"], p["state"]) for p in probes] == [("sglang==0.5.11", "held"), ("sglang==0.5.23", "held")]
    assert probes[0]["against"] == "" and probes[1]["against"].startswith("REPRODUCIBLE (exit 0)")
    assert "held: " in probes[1]["against"] and "version bitwise" in probes[1]["against"]  # compared, not skipped
    store = RunStore(root)
    for p in probes:  # each run's rows come from its own runtime_env's install
        rows = store.read_rows([p["run_id"]]).to_pylist()
        assert rows and {r["version"] for r in rows} == {p["version"]}
        assert store.manifest(p["run_id"])["environment"]["name"] == p["version"]
    assert doc["written"] is None and not out.exists()
    code, text, err = cli_main(capsys, *args, "--no-expect-break")
    assert code == 0, err
    assert text.splitlines()[-1].startswith("bisect small over 2 versions, 2 runs: no break: the first "
                                            "(sglang==0.5.11) and the last (sglang==0.5.23) version both held")


def test_a_version_pip_cannot_install_stops_the_bisect_naming_it(ray_2gpu, tmp_path, capsys):
    home = tmp_path / "wheels"
    home.mkdir()
    real = next(WHEELHOUSE.glob("sglang-0.5.11-*.whl"))
    (home / real.name).symlink_to(real)
    (home / "sglang-0.5.99-py3-none-any.whl").write_bytes(b"not a zip")  # passes the look before Ray; pip fails
    root = str(tmp_path / "runs")
    code, text, err = cli_main(capsys, "bisect", job(tmp_path, ["0.5.11", "0.5.99"], home), "--gpus", "1",
                               "--runs-root", root, "-o", str(tmp_path / "b.yaml"))
    assert code == 2, err
    assert text.splitlines()[0].startswith("sglang==0.5.11: held (run small-bisect-")
    line = [ln for ln in err.splitlines() if ln.startswith("detrun: error:")]
    assert line and line[0].startswith("detrun: error: bisect stopped at sglang==0.5.99: versions: sglang==0.5.99 "
                                       "cannot be installed: "), err
