"""The Python environment a Spark cluster's executors run sparksync's tasks in, shipped with the application
(``sparksync cluster-pack``): a virtual environment holding sparksync and what its tasks import (not pyspark:
each worker's Spark puts its own on the path), packed as one archive by venv-pack. Spark copies the archive to every
executor (``spark.archives``) and unpacks it in the executor's working directory; ``spark.pyspark.python`` names its
interpreter there. Nothing in it is a path of the driver's host.

What it does not carry is Python itself: venv-pack keeps the environment's link to the interpreter it was made
with, so the executors' hosts need the same Python at the same path (the same OS image, as is usual for a cluster's
hosts); the Spark release must be the driver's."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from sparksync import __version__
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.progress import Reporter, silent

ALIAS = "sparksync_env"           # the folder the archive is unpacked as, in each executor's working directory
TASK_PACKAGES = ("pandas>=2.2,<3",)      # what the tasks import beyond sparksync's own dependencies (the spark extra
                                         # without pyspark)
PACKER = "venv-pack>=0.2,<0.3"


@dataclass(frozen=True)
class PackedEnvironment:
    path: Path
    bytes: int
    seconds: float
    source: str

    def conf(self) -> dict[str, str]:
        """The ``[spark] conf`` settings that ship it to the executors and run their Python from it."""
        return {"spark.archives": f"{self.path}#{ALIAS}", "spark.pyspark.python": f"./{ALIAS}/bin/python"}


def pack(output: Path, report: Reporter = silent) -> PackedEnvironment:
    """A fresh virtual environment with this sparksync (this checkout's code when it was installed from one, with its
    pinned versions; else this version from the package index) and the tasks' packages, packed into ``output``."""
    t0 = time.perf_counter()
    output = output.expanduser().resolve()
    if not output.name.endswith((".tar.gz", ".tgz")):
        raise ConfigurationError(f"--output {output}: the archive is a .tar.gz (Spark unpacks it by its name)",
                                 obj=str(output))
    if not output.parent.is_dir():
        raise ConfigurationError(f"--output {output}: folder {output.parent} does not exist", obj=str(output))
    source, constraints = _source()
    with tempfile.TemporaryDirectory(prefix="sparksync-pack-") as tmp:
        env = Path(tmp) / "env"
        report(f"cluster-pack: a virtual environment for the executors ({sys.executable})")
        _run([sys.executable, "-m", "venv", str(env)], "making the virtual environment")
        report(f"cluster-pack: installing {source} and {', '.join(TASK_PACKAGES)}")
        _run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              *(["-c", str(constraints)] if constraints else []), source, *TASK_PACKAGES, PACKER], "installing")
        report(f"cluster-pack: packing into {output}")
        _run([str(env / "bin" / "venv-pack"), "-p", str(env), "-o", str(output), "--force"], "packing")
    return PackedEnvironment(output, output.stat().st_size, time.perf_counter() - t0, source)


def _source() -> tuple[str, Path | None]:
    """What to install: this checkout (pip's record of an install from a folder) with its constraints, or this
    version from the index."""
    try:
        text = metadata.distribution("sparksync").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    url = json.loads(text).get("url", "") if text else ""
    if url.startswith("file://"):
        root = Path(url.removeprefix("file://"))
        if (root / "pyproject.toml").is_file():
            pins = root / "constraints.txt"
            return str(root), pins if pins.is_file() else None
    return f"sparksync=={__version__}", None


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise SparksyncError(f"cluster-pack: {what} failed: {lines[-1].strip() if lines else f'exit {done.returncode}'}",
                             obj=command[0])
