"""The core runs where Spark and Java are not (the device side of web synchronization): the apply core,
the dialects, the metadata and the foundations import nothing of pyspark, and the CLI imports it only
inside the commands that run Spark jobs. Checked in a process where pyspark cannot be imported and no
``java`` is on the PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

BLOCK = textwrap.dedent("""
    import sys

    class NoSpark:
        def find_spec(self, name, path=None, target=None):
            if name == "pyspark" or name.startswith(("pyspark.", "py4j")):
                raise ImportError(f"{name} is not installed here")

    sys.meta_path.insert(0, NoSpark())
""")

CORE = ["sparksync.merge.batch", "sparksync.merge.staging", "sparksync.merge.decide", "sparksync.merge.lineage",
        "sparksync.merge.tracking", "sparksync.merge.generations", "sparksync.merge.stream", "sparksync.merge.watermarks",
        "sparksync.merge.conflicts", "sparksync.merge.resolvers", "sparksync.dialects.sqlite.dialect",
        "sparksync.dialects.postgres.dialect", "sparksync.metadata.store", "sparksync.locks", "sparksync.status",
        "sparksync.transactional.deliver", "sparksync.transactional.subscriber", "sparksync.cli.app"]


def _run(code: str, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = os.path.dirname(sys.executable)          # the interpreter, and no java
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_the_core_imports_nothing_of_spark(tmp_path):
    out = _run("import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in CORE)
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
