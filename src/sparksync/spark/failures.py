"""Errors that cross Spark.

A task that reports its failure as data (a result row with an :class:`~sparksync.errors.ErrorInfo`)
needs nothing here. A task that must fail (a snapshot read that cannot go on) raises
:class:`TaskFailed`, whose text is one tagged line holding the error's code, object and message;
the driver reads it back (:func:`recover`) from the Java exception that wraps the Python one, and
gets a typed error with the same code. Only a failure sparksync did not raise (a worker that
died, a bug) is left to :func:`spark_error_message`, which finds its most useful line.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import wraps
from typing import TypeVar

from sparksync.errors import ErrorInfo, ReportedError, SparksyncError, SparkUnavailable

_TAG = "sparksync-error"
_TAGGED = re.compile(r"\[" + _TAG + r" (\{.*\})\]\s*$", re.MULTILINE)

T = TypeVar("T")


class TaskFailed(Exception):
    """Raised inside a Spark task: ``info`` in a form that survives the trip to the driver."""

    def __init__(self, info: ErrorInfo):
        super().__init__(f"[{_TAG} {json.dumps(info.to_dict(), separators=(',', ':'))}]")
        self.info = info


def reporting_failures(read: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
    """For a generator run by a Spark task: a typed error it raises crosses Spark as a TaskFailed."""

    @wraps(read)
    def wrapper(*args, **kwargs) -> Iterator[T]:
        try:
            yield from read(*args, **kwargs)
        except SparksyncError as e:
            raise TaskFailed(e.info()) from None

    return wrapper


def recover(exc: BaseException) -> SparksyncError | None:
    """The typed error a Spark task reported, if ``exc`` (a failed job) carries one; or the JVM having ended under
    the job (``jvm_ended``)."""
    if isinstance(exc, SparksyncError):
        return exc
    if isinstance(exc, TaskFailed):
        return ReportedError(exc.info)
    found = _TAGGED.findall(str(exc))
    if not found:
        return jvm_ended(exc)
    try:
        return ReportedError(ErrorInfo.from_dict(json.loads(found[-1])))
    except (ValueError, KeyError):
        return None


def spark_error_message(exc: BaseException) -> str | None:
    """The useful line of an error that crossed Spark: the reported error's message, else (an error
    sparksync did not raise) the last line that names an exception."""
    reported = recover(exc)
    if reported is not None:
        return reported.message
    text = str(exc)
    if "Traceback" not in text and "PythonException" not in type(exc).__name__ and "Py4J" not in type(exc).__name__:
        return None
    java = getattr(exc, "java_exception", None)
    if text.startswith("An error occurred while calling") and java is not None:
        text = _java_cause(java) or text        # py4j's first line names only the JVM call
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ":" in ln and ln.split(":", 1)[0].endswith(("Error", "Exception")) and " " not in ln.split(":", 1)[0]:
            return ln
    return lines[0] if lines else type(exc).__name__


def _java_cause(java) -> str | None:
    """The innermost cause of a Java exception, as Java says it (``java.io.IOException: Cannot run program ...``);
    None when the JVM cannot be asked."""
    try:
        while java.getCause() is not None:
            java = java.getCause()
        return str(java.toString())
    except Exception:  # noqa: BLE001 - the JVM gone: the caller keeps py4j's own text
        return None


def jvm_ended(exc: BaseException, wait_s: float = 5.0) -> SparkUnavailable | None:
    """``exc`` is the py4j connection's failure because Spark's JVM ended (stopped or killed with the process's
    group, e.g. by a service manager): said as such, or None. The JVM is given ``wait_s`` to finish ending (its
    socket closes before its process does)."""
    if not isinstance(exc, ConnectionError) and not type(exc).__name__.startswith("Py4J"):
        return None
    spark = sys.modules.get("pyspark")          # not loaded: no JVM of this process to have ended
    context = getattr(spark, "SparkContext", None)
    proc = getattr(getattr(context, "_gateway", None), "proc", None)
    if proc is None:
        return None
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait_s)
    if proc.poll() is None:
        return None
    return SparkUnavailable(f"Spark's JVM ended under this run (exit {proc.returncode}: stopped or killed from "
                            "outside): its open transaction rolled back, the next run resumes from the watermarks")
