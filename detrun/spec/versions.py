"""`versions:` in a job: one package at several versions, each installed by Ray's runtime_env `pip` field
for a run of its own (run/submission.py submits them, run/environments.py builds them first).

    versions:
      flashinfer: [0.6.7.post3, 0.7.2.post1]   # the varied package (flashinfer, sglang or a distribution name),
                                               # oldest first; or `all`: every version of it in the wheelhouse
      wheelhouse: wheels/                      # optional: pip --no-index --find-links DIR (relative to the job file)
      with: ["flashinfer-cubin=={version}"]    # optional fixed extra pins ({version}: the environment's), or
                                               # per version: {0.6.7.post3: [apache-tvm-ffi==0.1.9], ...}
      deps: false                              # default: --no-deps --ignore-installed (only the listed pins change)

A validated spec dumps `versions` in this same form, so a stored spec validates to itself and `pin` writes a
job a user can read.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from ..errors import DetrunError

# The job's short names for the pip distributions detrun knows (another name is the distribution itself).
KNOWN: Dict[str, str] = {"flashinfer": "flashinfer-python"}
OPTIONS = ("wheelhouse", "with", "deps")  # the other keys of `versions:`
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ALL = "all"
PIP_DEFAULTS = ["--disable-pip-version-check", "--no-cache-dir", "--no-compile"]  # Ray's two, and no .pyc


def distribution(package: str) -> str:
    """The pip distribution a job's package name installs (flashinfer: flashinfer-python)."""
    return KNOWN.get(package, package)


class Versions(BaseModel):
    """`versions:` as validated: the varied package, its versions (or `all` in the wheelhouse), the options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str
    releases: Union[List[str], Literal["all"]]
    wheelhouse: Optional[str] = None
    with_: Union[List[str], Dict[str, List[str]]] = Field(default_factory=list)  # all versions', or per version
    deps: bool = False

    @model_validator(mode="before")
    @classmethod
    def _user_form(cls, data: object) -> object:
        """{flashinfer: [...], wheelhouse: ...} -> package, releases, options."""
        if not isinstance(data, dict) or "package" in data:
            return data
        varied = [k for k in data if k not in OPTIONS]
        if len(varied) != 1:
            found = f"found {', '.join(map(str, varied))}" if varied else "found none"
            raise ValueError(f"name one package and its versions, e.g. flashinfer: [0.6.7.post3, 0.7.2.post1] "
                             f"({found}; other keys: {', '.join(OPTIONS)})")
        listed = data[varied[0]] if isinstance(data[varied[0]], list) else []
        pins = data.get("with")
        for item in [*listed, *(pins if isinstance(pins, dict) else [])]:
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                raise ValueError(f"{varied[0]}: {item!r} is a number in YAML (0.10 reads as 0.1): quote each version, "
                                 "e.g. \"0.10\"")
        out = {k: v for k, v in data.items() if k in OPTIONS and k != "with"}
        if "with" in data:
            out["with_"] = data["with"]
        return dict(out, package=varied[0], releases=data[varied[0]])

    @model_serializer(mode="plain")
    def _dump(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {self.package: self.releases if isinstance(self.releases, str) else list(self.releases)}
        if self.wheelhouse is not None:
            out["wheelhouse"] = self.wheelhouse
        if self.with_:
            out["with"] = dict(self.with_) if isinstance(self.with_, dict) else list(self.with_)
        if self.deps:
            out["deps"] = True
        return out

    @field_validator("package")
    @classmethod
    def _package(cls, package: str) -> str:
        if not NAME.fullmatch(package):
            raise ValueError(f"{package!r} is not a package name")
        return package

    @model_validator(mode="after")
    def _check(self) -> "Versions":
        """Errors name the key as the job wrote it (versions: flashinfer: ...)."""
        if self.releases == ALL and self.wheelhouse is None:
            raise ValueError(f"{self.package}: all needs a wheelhouse (the versions are those of its wheels)")
        releases = [] if isinstance(self.releases, str) else self.releases
        if not isinstance(self.releases, str) and not releases:
            raise ValueError(f"{self.package}: list at least one version")
        for text in releases:
            try:
                Version(text)
            except InvalidVersion:
                raise ValueError(f"{self.package}: {text!r} is not a version (PEP 440)") from None
        for older, newer in zip(releases, releases[1:]):
            if Version(older) >= Version(newer):
                raise ValueError(f"{self.package}: versions are listed oldest first, each once ({older} then {newer})")
        if isinstance(self.with_, dict):
            for version in self.with_:
                if not isinstance(self.releases, str) and version not in releases:
                    raise ValueError(f"with: {version} is not one of the versions of {self.package}")
        for pin in self.extra_pins():
            try:
                Requirement(pin.replace("{version}", "0"))
            except InvalidRequirement:
                raise ValueError(f"with: {pin!r} is not a requirement (e.g. flashinfer-cubin=={{version}})") from None
        return self

    def extra_pins(self, version: Optional[str] = None) -> List[str]:
        """with:'s pins for a version ({version} filled), or every pin as written (None)."""
        if isinstance(self.with_, dict):
            pins = [p for v, ps in self.with_.items() if version in (None, v) for p in ps]
        else:
            pins = list(self.with_)
        return pins if version is None else [p.replace("{version}", version) for p in pins]


@dataclass(frozen=True)
class VersionEnv:
    """One environment of `versions:`: what its run's tasks install through Ray's runtime_env."""

    name: str  # flashinfer==0.7.2.post1: the rows' `version`, and how bisect and pin name it
    package: str  # as the job names it (flashinfer)
    version: str
    distribution: str  # the pip distribution (flashinfer-python)
    requirements: Tuple[str, ...]  # what pip installs (the package pinned first, then with:)
    pip_options: Tuple[str, ...]  # pip install's options (--no-index --find-links DIR, --no-deps ...)
    wheelhouse: Optional[str] = None  # absolute

    @property
    def tag(self) -> str:
        """The environment in a run id: flashinfer-0.7.2.post1 (a run id's characters only)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.package}-{self.version}")

    def runtime_env(self) -> Dict[str, Any]:
        """The Ray runtime_env fields of this environment (the run's env_vars are added beside them)."""
        return {"pip": {"packages": list(self.requirements), "pip_install_options": list(self.pip_options)}}

    def found(self, have: str) -> str:
        """What a task of this environment found installed (have: installed_version of its distribution)."""
        return f"{self.distribution} {have}" if have else f"no {self.distribution}"

    def manifest(self) -> Dict[str, Any]:
        """What a run's manifest records of its environment."""
        return {"name": self.name, "package": self.package, "version": self.version,
                "distribution": self.distribution, "requirements": list(self.requirements),
                "pip_options": list(self.pip_options)}


def installed_version(dist: str) -> str:
    """The installed version of a distribution ("" when none), read without importing it (no torch here)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def wheelhouse_versions(wheelhouse: str, dist: str) -> List[str]:
    """The versions of dist among the wheels and sdists in a directory, oldest first."""
    found = set()
    for _, version in _archives(wheelhouse):
        if version[0] == canonicalize_name(dist):
            found.add(version[1])
    return [str(v) for v in sorted(found)]


def _archives(wheelhouse: str) -> List[Tuple[str, Tuple[str, Version]]]:
    """(file name, (canonical name, version)) of each wheel or sdist in the directory."""
    try:
        names = sorted(os.listdir(wheelhouse))
    except OSError as exc:
        raise DetrunError(f"versions.wheelhouse {wheelhouse}: cannot read it ({exc.strerror})") from None
    out = []
    for name in names:
        try:
            if name.endswith(".whl"):
                dist, version, _, _ = parse_wheel_filename(name)
            elif name.endswith((".tar.gz", ".zip")):
                dist, version = parse_sdist_filename(name)
            else:
                continue
        except ValueError:  # packaging's InvalidWheelFilename / InvalidSdistFilename
            continue
        out.append((name, (str(dist), version)))
    return out


def environments(spec: Any) -> List["VersionEnv"]:
    """The job's version environments in its order (`all`: the wheelhouse's, oldest first); [] without
    versions:. spec: a JobSpec (its wheelhouse already absolute: load_spec makes it so)."""
    versions: Optional[Versions] = getattr(spec, "versions", None)
    if versions is None:
        return []
    dist = distribution(versions.package)
    wheelhouse = str(Path(versions.wheelhouse).absolute()) if versions.wheelhouse else None
    releases = (wheelhouse_versions(str(wheelhouse), dist) if versions.releases == ALL
                else list(versions.releases))
    if not releases:
        raise DetrunError(f"versions.{versions.package}: all, but {wheelhouse} holds no wheel of {dist}")
    options = list(PIP_DEFAULTS)
    if wheelhouse:
        options += ["--no-index", "--find-links", wheelhouse]
    if not versions.deps:
        options += ["--no-deps", "--ignore-installed"]
    return [VersionEnv(f"{versions.package}=={v}", versions.package, v, dist,
                       (f"{dist}=={v}", *versions.extra_pins(v)),
                       tuple(options), wheelhouse) for v in releases]


def check_wheelhouse(envs: Sequence[VersionEnv]) -> None:
    """Each environment's exact pins have a wheel (or sdist) in its wheelhouse: else one DetrunError naming
    the first missing one (before Ray, which would fail the same way only once its pip ran)."""
    have: Dict[str, set] = {}
    for env in envs:
        if env.wheelhouse is None:
            continue
        if env.wheelhouse not in have:
            have[env.wheelhouse] = {(d, v) for _, (d, v) in _archives(env.wheelhouse)}
        for text in env.requirements:
            req = Requirement(text)
            pinned = [s.version for s in req.specifier if s.operator in ("==", "===")]
            for version in pinned:
                if (canonicalize_name(req.name), Version(version)) not in have[env.wheelhouse]:
                    raise DetrunError(f"versions: {env.name} cannot be installed: no wheel of {req.name}=={version} "
                                      f"in the wheelhouse {env.wheelhouse}")


def absolute_wheelhouse(data: Any, base: Path) -> Any:
    """A parsed job whose versions.wheelhouse is relative, made absolute against base (the job file's folder)."""
    versions = data.get("versions") if isinstance(data, dict) else None
    if not isinstance(versions, dict):
        return data
    home = versions.get("wheelhouse")
    if not isinstance(home, str) or Path(home).is_absolute():
        return data
    return dict(data, versions=dict(versions, wheelhouse=os.path.abspath(base / home)))


def pin(spec_dict: dict, names: Sequence[str]) -> dict:
    """The job restricted to the named environments (VersionEnv.name, e.g. flashinfer==0.7.2.post1), in the job's
    order: bisect's reproducer, and one version at a time. A name the job does not list: DetrunError naming it."""
    raw = spec_dict.get("versions")
    if raw is None:
        raise DetrunError("pin: the job has no versions:")
    try:
        versions = Versions.model_validate(raw)
    except ValueError as exc:
        raise DetrunError(f"versions: {exc}") from None
    listed = None if versions.releases == ALL else list(versions.releases)
    chosen = []
    for name in names:
        package, sep, version = name.partition("==")
        if not sep or package != versions.package or (listed is not None and version not in listed):
            have = ", ".join(f"{versions.package}=={v}" for v in listed) if listed else f"{versions.package}==..."
            raise DetrunError(f"pin: {name!r} is not one of the job's versions ({have})")
        chosen.append(version)
    if not chosen:
        raise DetrunError("pin: name at least one version")
    order = listed if listed is not None else sorted(set(chosen), key=Version)
    kept = [v for v in order if v in chosen]
    out = copy.deepcopy(spec_dict)
    pins = ({v: p for v, p in versions.with_.items() if v in kept} if isinstance(versions.with_, dict)
            else list(versions.with_))
    out["versions"] = Versions(package=versions.package, releases=kept, wheelhouse=versions.wheelhouse,
                               with_=pins, deps=versions.deps).model_dump()
    if versions.package == "sglang" and isinstance(out.get("sglang"), dict) and len(kept) == 1:
        out["sglang"] = dict(out["sglang"], version=kept[0])  # the profile (and backend sglang) of the one release
    return out
