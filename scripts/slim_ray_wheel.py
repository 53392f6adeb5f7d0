"""Ray for the lent GPU machine, which has no network, no Ray and Python 3.12 (x86-64), and takes at most
64 MiB of carried files per call: downloads the ray wheel and the dependency wheels that machine lacks,
and repacks ray without what `bench --ray` never loads (the Java jars, the dashboard's web client, the ML
libraries), into .whl/ (git-ignored; scripts/gpu_session.sh installs every wheel there). Never commit
the wheels.

    python scripts/slim_ray_wheel.py                      # ray 2.60.0 for CPython 3.12 -> .whl/

Checked on this machine's Python (3.11) in a bare venv holding only what the GPU machine has:

    python scripts/slim_ray_wheel.py --python 3.11 --out /tmp/whl311
    python -m venv /tmp/slim && /tmp/slim/bin/pip install click filelock msgpack packaging protobuf \
        pyyaml requests attrs typing_extensions && /tmp/slim/bin/pip install --no-deps /tmp/whl311/*.whl
    /tmp/slim/bin/python -c "import ray; ray.init(); print(ray.get(ray.remote(lambda: 1).remote()))"

The GPU check of issue 26 (a one-node Ray cluster on the lent GPU gives the local pool's rows and report
on the bundled level-1 suite) is scripts/ray_gpu_check.sh; its header says how to run it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

RAY_VERSION = "2.60.0"
# ray's own requirements that the GPU machine lacks (it has click, filelock, msgpack, packaging,
# protobuf, pyyaml, requests, attrs, typing_extensions): jsonschema and its dependencies.
EXTRA_WHEELS = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py")
# Never imported by ray core (ray.init, tasks, `ray start`): Java workers, the dashboard's web client,
# and the libraries built on core.
DROPPED = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/data/", "ray/serve/",
           "ray/tune/", "ray/train/", "ray/llm/")
LIMIT_BYTES = 50 * 10**6


def download(requirement: str, python: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "--platform", "manylinux2014_x86_64",
               "-d", str(into), requirement]
    subprocess.run(command, check=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    return next(p for p in into.iterdir() if p.name.lower().startswith(name + "-"))


def slim(wheel: Path, out: Path) -> Path:
    """`wheel` without the DROPPED folders, with a RECORD that lists what is left (same file name)."""
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as slimmed:
        record_name = next(n for n in source.namelist() if n.endswith(".dist-info/RECORD"))
        lines = []
        for info in source.infolist():
            if info.filename.startswith(DROPPED) or info.filename == record_name:
                continue
            data = source.read(info)
            slimmed.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{info.filename},sha256={digest},{len(data)}")
        slimmed.writestr(record_name, "\n".join([*lines, f"{record_name},,"]) + "\n")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ray", default=RAY_VERSION, help="ray version (default %(default)s)")
    parser.add_argument("--python", default="3.12", help="the target's CPython (default %(default)s)")
    parser.add_argument("--out", type=Path, default=Path(".whl"), help="folder for the wheels (default .whl)")
    args = parser.parse_args()
    args.out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        ray = slim(download(f"ray=={args.ray}", args.python, Path(scratch)), args.out)
        extras = [shutil.copy(download(name, args.python, Path(scratch)), args.out) for name in EXTRA_WHEELS]
        extras = [Path(path) for path in extras]
    sizes = {p.name: p.stat().st_size for p in [ray, *extras]}
    for name, size in sizes.items():
        print(f"{size / 1e6:7.2f} MB  {args.out / name}")
    total = sum(sizes.values())
    print(f"{total / 1e6:7.2f} MB  in all (limit {LIMIT_BYTES / 1e6:.0f} MB)")
    return 0 if total < LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
