"""The core runs where Spark and Java are not (the device side of web synchronization): no module but the
Data Source imports pyspark when it is imported (the Spark jobs import it inside the functions that run
them), and the CLI runs every command's help, and status, without it. Checked in a process where pyspark
cannot be imported and no ``java`` is on the PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

BLOCK = textwrap.dedent("""
    import sys

    class NoSpark:
        def find_spec(self, name, path=None, target=None):
            if name == "pyspark" or name.startswith(("pyspark.", "py4j")):
                raise ImportError(f"{name} is not installed here")

    sys.meta_path.insert(0, NoSpark())
""")

SRC = Path(__file__).resolve().parents[2] / "src"
# Every module of the package loads without pyspark, but the Data Source (a pyspark class, loaded by the
# Spark session when it starts): the apply core, dialects, metadata, foundations, features, entry points
# and the CLI alike, the merge agent and validation included (they import pyspark inside the functions
# that run Spark).
CORE = sorted(".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
              for p in (SRC / "sparksync").rglob("*.py"))
SPARK_ONLY = {"sparksync.spark.datasource"}


def _run(code: str, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = os.path.dirname(sys.executable)          # the interpreter, and no java
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_the_core_imports_nothing_of_spark(tmp_path):
    out = _run("import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in CORE if m not in SPARK_ONLY)
               + "assert not [m for m in sys.modules if m.startswith(('pyspark', 'py4j'))]\nprint('ok')\n", tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_cli_runs_without_spark_or_java(tmp_path):
    """``--help`` of every command, and a command that needs no Spark job (``status`` of a topology not
    set up yet), with pyspark unimportable and no java on the PATH."""
    (tmp_path / "sparksync.toml").write_text(
        '[publisher]\nname = "HQ"\ndatabase = "sqlite:///hq.db"\n[[publications]]\nname = "Sales"\n'
        '  [[publications.articles]]\n  table = "T"\n[[subscriptions]]\nname = "S1"\npublication = "Sales"\n'
        'database = "sqlite:///s1.db"\n', encoding="utf-8")
    code = textwrap.dedent("""
        from sparksync.cli.app import app
        from typer.main import get_command
        from typer.testing import CliRunner

        runner = CliRunner()
        for name in [None, *get_command(app).commands]:
            result = runner.invoke(app, ([name] if name else []) + ["--help"])
            assert result.exit_code == 0 and "Usage" in result.output, (name, result.output)
        result = runner.invoke(app, ["status", "-c", "sparksync.toml"])
        assert result.exit_code == 0 and "not set up" in result.output, result.output
        print("ok")
    """)
    out = _run(code, tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_a_command_that_runs_spark_jobs_says_what_to_install(tmp_path):
    """Where pyspark is not installed (a device), a command that needs Spark stops with one message naming
    the extra to install, not a traceback."""
    code = textwrap.dedent("""
        from sparksync.cli.app import app
        from typer.testing import CliRunner

        result = CliRunner().invoke(app, ["demo", "--dir", "d"])
        assert result.exit_code == 1, (result.exit_code, result.output)
        print(result.output)
    """)
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pip install 'sparksync[spark]'" in out.stdout and "Traceback" not in out.stdout, out.stdout


def test_the_python_api_loads_without_spark_or_java(tmp_path):
    """``from sparksync import Topology, Device`` (and every name of the API) where pyspark cannot be imported."""
    out = _run("import sparksync\nfrom sparksync import Device, Topology\n"
               "names = [getattr(sparksync, n) for n in sparksync.__all__]\n"
               "assert Device.__module__.startswith('sparksync.api') and Topology.__module__ == 'sparksync.config'\n"
               "assert not [m for m in sys.modules if m.startswith(('pyspark', 'py4j'))]\nprint('ok')\n", tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
