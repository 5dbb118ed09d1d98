"""detrun bisect across SGLang releases on SGLang's own backend: each release's tree first on sys.path of a
process of its own (tests/sglang_release_run.py's ReleaseProbe) instead of a Ray runtime_env per release (the
GPU machine has one Python environment, 0.5.23's dependencies, and no index). Real FlashInfer on a GPU; --fake:
the recording fake wrappers on CPU (as tests/test_bisect_sglang_releases.py).

Usage: python3 scripts/sglang_release_bisect.py JOB --tree 0.5.14=DIR [--tree ...] [--fake] [detrun bisect options]

DIR holds the release's sglang/ and its dist-info (an unpacked wheel or scripts/pack-sglang.sh --trees' tarball).
Prints and exits as `detrun bisect` does (1: a break located).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detrun.cli import main  # noqa: E402
from detrun.run import bisect  # noqa: E402
from tests.sglang_release_run import ReleaseProbe  # noqa: E402


def run(argv) -> None:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return
    trees, rest, fake = {}, [], False
    args = iter(argv)
    for arg in args:
        if arg == "--tree":
            version, _, folder = next(args).partition("=")
            trees[version] = Path(folder).resolve()
        elif arg == "--fake":
            fake = True
        else:
            rest.append(arg)
    before = bisect._submit_probe
    ReleaseProbe.install(setattr, trees, fake)
    try:
        main(["bisect", *rest])
    finally:
        bisect._submit_probe = before


if __name__ == "__main__":
    run(sys.argv[1:])
