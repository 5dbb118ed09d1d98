"""`versions:` in a job (detrun/spec/versions.py): the spec form, the environments and their Ray runtime_env,
the wheelhouse check, pin; submit's checks before Ray; the task's version check and the rows' `version`.
No Ray: tests/test_versions_ray.py installs real versions through Ray."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from detrun.errors import DetrunError
from detrun.kernels import envinfo
from detrun.kernels.backends.base import VersionMismatch
from detrun.run.runner import task_runtime_env
from detrun.spec.model import load_spec, spec_from_dict
from detrun.spec.versions import check_wheelhouse, environments, pin
from detrun.store.runs import RunStore
from tests.helpers import TINY, cli_error, job_file, run_inline, small

FI = ["0.6.7.post3", "0.7.2.post1"]


def touch_wheels(folder: Path, *names: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return str(folder)


def test_without_versions_a_spec_has_none_and_no_environment():
    spec = spec_from_dict(small())
    assert spec.versions is None and environments(spec) == []
    assert spec_from_dict(spec.model_dump(mode="json")) == spec


def test_the_job_form_dumps_as_written_and_validates_to_itself():
    versions = {"flashinfer": FI, "wheelhouse": "/w", "with": ["flashinfer-cubin=={version}"]}
    spec = spec_from_dict(small(versions=versions))
    dumped = spec.model_dump(mode="json")
    assert dumped["versions"] == versions
    assert spec_from_dict(dumped) == spec


def test_environments_in_the_jobs_order_with_offline_pip_options():
    versions = {"flashinfer": FI, "wheelhouse": "/w", "with": ["flashinfer-cubin=={version}"]}
    envs = environments(spec_from_dict(small(versions=versions)))
    assert [e.name for e in envs] == ["flashinfer==0.6.7.post3", "flashinfer==0.7.2.post1"]
    assert envs[1].requirements == ("flashinfer-python==0.7.2.post1", "flashinfer-cubin==0.7.2.post1")
    assert envs[1].tag == "flashinfer-0.7.2.post1"
    pip = envs[0].runtime_env()["pip"]
    assert pip["packages"] == ["flashinfer-python==0.6.7.post3", "flashinfer-cubin==0.6.7.post3"]
    options = pip["pip_install_options"]
    assert options[options.index("--find-links") + 1] == "/w" and "--no-index" in options
    assert "--no-deps" in options and "--ignore-installed" in options


def test_without_a_wheelhouse_the_index_is_used_and_deps_true_keeps_dependencies():
    env = environments(spec_from_dict(small(versions={"sglang": ["0.5.11"], "deps": True})))[0]
    assert env.requirements == ("sglang==0.5.11",)
    assert not {"--no-index", "--find-links", "--no-deps", "--ignore-installed"} & set(env.pip_options)


def test_all_is_every_version_of_the_package_in_the_wheelhouse_oldest_first(tmp_path):
    home = touch_wheels(tmp_path / "w", "sglang-0.5.23-py3-none-any.whl", "sglang-0.5.9-py3-none-any.whl",
                        "sglang-0.5.11.tar.gz", "other-1.0-py3-none-any.whl", "notes.txt")
    spec = spec_from_dict(small(versions={"sglang": "all", "wheelhouse": home}))
    assert [e.version for e in environments(spec)] == ["0.5.9", "0.5.11", "0.5.23"]
    empty = spec_from_dict(small(versions={"flashinfer": "all", "wheelhouse": home}))
    with pytest.raises(DetrunError, match="holds no wheel of flashinfer-python"):
        environments(empty)


@pytest.mark.parametrize("versions, message", [
    ({"flashinfer": ["0.7.2.post1", "0.6.7.post3"]}, "oldest first"),
    ({"flashinfer": ["0.6.7", "0.6.7"]}, "oldest first, each once"),
    ({"flashinfer": []}, "at least one version"),
    ({"flashinfer": ["not a version"]}, "'not a version' is not a version"),
    ({"flashinfer": FI, "sglang": ["0.5.11"]}, "name one package"),
    ({"wheelhouse": "/w"}, "found none"),
    ({"flashinfer": "all"}, "all needs a wheelhouse"),
    ({"flashinfer": FI, "with": ["?? bad"]}, "is not a requirement"),
    ({"sglang": [0.10, "0.11"]}, "0.1 is a number in YAML"),
    ({"sglang": ["0.10"], "with": {0.10: ["x==1"]}}, "0.1 is a number in YAML"),
])
def test_a_bad_versions_field_is_one_error_naming_it(versions, message):
    with pytest.raises(DetrunError, match=message) as err:
        spec_from_dict(small(versions=versions), "job.yaml")
    assert str(err.value).startswith("job.yaml: versions")


def test_the_wheelhouse_is_relative_to_the_job_file(tmp_path, monkeypatch):
    (tmp_path / "jobs").mkdir()
    path = tmp_path / "jobs" / "job.yaml"
    path.write_text(yaml.safe_dump(small(versions={"sglang": ["0.5.11"], "wheelhouse": "../wheels"})))
    monkeypatch.chdir(tmp_path / "jobs")
    spec = load_spec(path)
    assert spec.versions is not None and spec.versions.wheelhouse == str(tmp_path / "wheels")
    overridden = load_spec(path, ["versions.wheelhouse=here"])  # a --set is read against the job file too
    assert environments(overridden)[0].wheelhouse == str(tmp_path / "jobs" / "here")


def test_a_version_missing_from_the_wheelhouse_is_named_before_ray(tmp_path):
    home = touch_wheels(tmp_path / "w", "flashinfer_python-0.6.7.post3-py3-none-any.whl",
                        "flashinfer_cubin-0.6.7.post3-py3-none-any.whl",
                        "flashinfer_python-0.7.2.post1-py3-none-any.whl")
    envs = environments(spec_from_dict(small(versions={"flashinfer": FI, "wheelhouse": home,
                                                       "with": ["flashinfer-cubin=={version}"]})))
    check_wheelhouse(envs[:1])
    with pytest.raises(DetrunError) as err:
        check_wheelhouse(envs)
    assert str(err.value) == (f"versions: flashinfer==0.7.2.post1 cannot be installed: no wheel of "
                              f"flashinfer-cubin==0.7.2.post1 in the wheelhouse {home}")


def test_pin_keeps_the_named_environments_in_the_jobs_order():
    data = small(versions={"sglang": ["0.5.9", "0.5.11", "0.5.23"], "wheelhouse": "/w"})
    pinned = pin(data, ["sglang==0.5.23", "sglang==0.5.9"])
    assert pinned["versions"] == {"sglang": ["0.5.9", "0.5.23"], "wheelhouse": "/w"}
    assert data["versions"]["sglang"] == ["0.5.9", "0.5.11", "0.5.23"]  # the job itself unchanged
    assert [e.name for e in environments(spec_from_dict(pin(data, ["sglang==0.5.11"])))] == ["sglang==0.5.11"]
    assert pin(spec_from_dict(data).model_dump(mode="json"), ["sglang==0.5.11"])["versions"]["sglang"] == ["0.5.11"]


def test_pin_to_one_sglang_release_sets_the_profile_to_it():
    data = small(versions={"sglang": ["0.5.14", "0.5.15"], "wheelhouse": "/w"},
                 sglang={"version": "0.5.15", "deterministic_inference": False})
    assert pin(data, ["sglang==0.5.14"])["sglang"] == {"version": "0.5.14", "deterministic_inference": False}
    assert spec_from_dict(pin(data, ["sglang==0.5.14"])).sglang.version == "0.5.14"
    both = pin(data, ["sglang==0.5.14", "sglang==0.5.15"])  # two releases: the job's own profile stays
    assert both["sglang"]["version"] == "0.5.15" and data["sglang"]["version"] == "0.5.15"


def test_pin_of_all_names_versions_of_the_wheelhouse():
    data = small(versions={"sglang": "all", "wheelhouse": "/w"})
    assert pin(data, ["sglang==0.5.23", "sglang==0.5.11"])["versions"]["sglang"] == ["0.5.11", "0.5.23"]


@pytest.mark.parametrize("names, message", [
    (["sglang==0.5.12"], "'sglang==0.5.12' is not one of the job's versions (sglang==0.5.11, sglang==0.5.23)"),
    (["flashinfer==0.5.11"], "is not one of"),
    (["0.5.11"], "is not one of"),
    ([], "name at least one version"),
])
def test_pin_refuses_a_name_the_job_does_not_list(names, message):
    with pytest.raises(DetrunError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pin(small(versions={"sglang": ["0.5.11", "0.5.23"]}), names)
    with pytest.raises(DetrunError, match="has no versions"):
        pin(small(), ["sglang==0.5.11"])


def test_a_version_missing_from_the_wheelhouse_stops_submit_before_ray(tmp_path, capsys, no_ray):
    home = touch_wheels(tmp_path / "w", "sglang-0.5.11-py3-none-any.whl")
    job = job_file(tmp_path, **TINY, versions={"sglang": ["0.5.11", "0.5.12"], "wheelhouse": "w"})
    code, line = cli_error(capsys, "submit", job, "--runs-root", str(tmp_path / "runs"))
    assert code == 2
    assert line == (f"detrun: error: versions: sglang==0.5.12 cannot be installed: no wheel of sglang==0.5.12 in the "
                    f"wheelhouse {home}")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_taken_run_id_of_an_environment_is_refused_before_ray(tmp_path, capsys, no_ray):
    touch_wheels(tmp_path / "w", "sglang-0.5.11-py3-none-any.whl", "sglang-0.5.23-py3-none-any.whl")
    job = job_file(tmp_path, **TINY, versions={"sglang": ["0.5.11", "0.5.23"], "wheelhouse": "w"})
    RunStore(str(tmp_path / "runs")).create_run("v-sglang-0.5.23", small(), 1)
    code, line = cli_error(capsys, "submit", job, "--run-id", "v", "--runs-root", str(tmp_path / "runs"))
    assert code == 2 and "--run-id v-sglang-0.5.23: run v-sglang-0.5.23 already exists" in line


def test_a_task_runs_in_its_environments_pip_install_with_the_jobs_flags():
    plain = spec_from_dict(small())
    assert task_runtime_env(plain) == {"env_vars": {"SGLANG_FLASHINFER_USE_PAGED": "1"}}  # as without versions
    assert task_runtime_env(plain, 0)["env_vars"] == {"RAY_worker_niceness": "0", "SGLANG_FLASHINFER_USE_PAGED": "1"}
    one = spec_from_dict(small(versions={"sglang": ["0.5.11"], "wheelhouse": "/w"}))
    env = task_runtime_env(one)
    assert env["env_vars"] == {"SGLANG_FLASHINFER_USE_PAGED": "1"}
    assert env["pip"] == environments(one)[0].runtime_env()["pip"]
    with pytest.raises(DetrunError, match="a run runs one environment, the spec names 2"):
        task_runtime_env(spec_from_dict(small(versions={"sglang": ["0.5.11", "0.5.23"]})))


def test_a_task_that_imports_another_version_is_an_environment_error(store, monkeypatch):
    monkeypatch.setattr(envinfo, "installed_version", lambda dist: {"sglang": "0.5.23"}.get(dist, ""))
    spec = spec_from_dict(small(versions={"sglang": ["0.5.11"]}))
    with pytest.raises(VersionMismatch, match="environment sglang==0.5.11 has sglang 0.5.23 installed"):
        envinfo.check_version(spec)
    assert envinfo.check_version(spec_from_dict(small(versions={"sglang": ["0.5.23"]}))) == "sglang==0.5.23"
    assert envinfo.check_version(spec_from_dict(small())) == ""
    with pytest.raises(DetrunError, match="sglang==0.5.11 has sglang 0.5.23 installed"):  # no rows, exit 2
        run_inline(store, small(**TINY, versions={"sglang": ["0.5.11"]}), "r")
    assert store.read_rows(["r"]).num_rows == 0


def test_the_rows_of_an_environment_record_its_name(store, monkeypatch):
    monkeypatch.setattr(envinfo, "installed_version", lambda dist: {"sglang": "0.5.23"}.get(dist, ""))
    run_inline(store, small(**TINY, versions={"sglang": ["0.5.23"]}), "r")
    run_inline(store, small(**TINY), "plain")
    assert {r["version"] for r in store.read_rows(["r"]).to_pylist()} == {"sglang==0.5.23"}
    assert {r["version"] for r in store.read_rows(["plain"]).to_pylist()} == {""}


def test_with_per_version_pins_each_environment_and_pin_keeps_its_versions_own():
    pins = {"0.6.7.post3": ["apache-tvm-ffi==0.1.9"], "0.7.2.post1": ["apache-tvm-ffi==0.1.15.post2"]}
    data = small(versions={"flashinfer": FI, "with": pins})
    envs = environments(spec_from_dict(data))
    assert [e.requirements for e in envs] == [("flashinfer-python==0.6.7.post3", "apache-tvm-ffi==0.1.9"),
                                             ("flashinfer-python==0.7.2.post1", "apache-tvm-ffi==0.1.15.post2")]
    assert spec_from_dict(data).model_dump(mode="json")["versions"]["with"] == pins
    assert pin(data, ["flashinfer==0.7.2.post1"])["versions"]["with"] == {"0.7.2.post1": pins["0.7.2.post1"]}
    with pytest.raises(DetrunError, match="with: 0.7.3 is not one of the versions of flashinfer"):
        spec_from_dict(small(versions={"flashinfer": FI, "with": {"0.7.3": ["x==1"]}}))
