"""An unpacked wheel's tree (its packages and its NAME-VERSION.dist-info, e.g. the stripped flashinfer 0.7.2.post1
that scripts/pack-device-wheels.sh carries as flashinfer.tar.xz) zipped back into a wheel in a wheelhouse, its
RECORD written for the files the tree holds, so pip (in Ray's runtime_env) installs it like the release.

    python3 scripts/wheel_from_tree.py TREE WHEELHOUSE      # prints the wheel's path
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import zipfile
from email.parser import Parser
from pathlib import Path


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_from_tree(tree: Path, wheelhouse: Path) -> Path:
    infos = sorted(tree.glob("*.dist-info"))
    if len(infos) != 1:
        raise SystemExit(f"{tree}: expected one *.dist-info, found {len(infos)}")
    info = infos[0]
    meta = Parser().parsestr((info / "METADATA").read_text(encoding="utf-8"))
    tags = [v for k, v in Parser().parsestr((info / "WHEEL").read_text(encoding="utf-8")).items() if k == "Tag"]
    name, version = meta["Name"].replace("-", "_").lower(), meta["Version"]
    tag = tags[0] if len(tags) == 1 else "py3-none-any"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    out = wheelhouse / f"{name}-{version}-{tag}.whl"
    record_name = f"{info.name}/RECORD"
    lines = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as whl:
        for path in sorted(p for p in tree.rglob("*") if p.is_file()):
            arc = path.relative_to(tree).as_posix()
            if arc == record_name or "__pycache__" in arc:
                continue
            data = path.read_bytes()
            whl.writestr(arc, data)
            lines.append(f"{arc},{_hash(data)},{len(data)}")
        whl.writestr(record_name, "\n".join(lines + [f"{record_name},,"]) + "\n")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", type=Path, help="the unpacked wheel (its packages and one *.dist-info)")
    parser.add_argument("wheelhouse", type=Path, help="the folder the wheel is written to")
    args = parser.parse_args()
    print(wheel_from_tree(args.tree, args.wheelhouse))
