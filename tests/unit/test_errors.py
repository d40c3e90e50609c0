"""Errors as data: what crosses Spark, what is retried, what the CLI exits with."""

from __future__ import annotations

import pytest

from sparksync.cli.common import exit_code
from sparksync.errors import (
    ConfigurationError,
    ConnectionFailed,
    ConstraintViolation,
    DatabaseError,
    ErrorInfo,
    ReportedError,
    SchemaError,
)
from sparksync.retry import with_retries
from sparksync.spark.failures import TaskFailed, recover, spark_error_message


def test_a_typed_error_becomes_data_with_its_code_object_and_retry_advice():
    info = ConnectionFailed("cannot reach S1", obj="S1").info()
    assert info == ErrorInfo("connection", "cannot reach S1", "S1", True)
    assert ErrorInfo.from_dict(info.to_dict()) == info
    assert ConstraintViolation("dup", kind="primary_key").info().transient is False


def test_an_unexpected_exception_is_internal_and_says_where():
    try:
        {}["missing"]
    except KeyError as e:
        info = ErrorInfo.of(e)
    assert info.code == ErrorInfo.INTERNAL and info.first_line() == "KeyError: 'missing'"
    assert "test_errors.py" in info.message


SPARK_TEXT = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/x/pyspark/worker.py", line 1, in main
sparksync.spark.failures.TaskFailed: {tag}
"""


def test_a_task_failure_is_read_back_from_the_text_spark_wraps_it_in():
    tag = str(TaskFailed(SchemaError("publication P: table T has no primary key", obj="T").info()))
    wrapped = RuntimeError(SPARK_TEXT.format(tag=tag))
    error = recover(wrapped)
    assert isinstance(error, ReportedError)
    assert (error.code, error.obj, error.message) == ("schema", "T", "publication P: table T has no primary key")
    assert spark_error_message(wrapped) == "publication P: table T has no primary key"


def test_messages_with_brackets_and_lines_survive_the_trip():
    message = "value [1, 2] does not fit\ncolumn x"
    error = recover(RuntimeError(SPARK_TEXT.format(tag=str(TaskFailed(ErrorInfo("value", message, "P/T"))))))
    assert error is not None and error.message == message and error.code == "value"


def test_an_error_sparksync_did_not_raise_is_not_mistaken_for_one():
    assert recover(RuntimeError("Python worker exited unexpectedly (crashed)")) is None
    text = SPARK_TEXT.format(tag="") + "MemoryError: out of memory\n"
    assert spark_error_message(RuntimeError(text)) == "MemoryError: out of memory"


class _Java:
    """A Java exception as py4j hands it over: a cause, and its own text."""

    def __init__(self, text: str, cause: _Java | None = None):
        self.text, self.cause = text, cause

    def getCause(self):  # noqa: N802 - Java's name
        return self.cause

    def toString(self):  # noqa: N802
        return self.text


class Py4JJavaError(Exception):
    def __init__(self, java: _Java):
        super().__init__("An error occurred while calling o140.parquet.\n")
        self.java_exception = java


def test_a_java_failure_is_said_by_its_innermost_cause_not_by_the_jvm_call():
    root = _Java('java.io.IOException: Cannot run program "./env/bin/python": error=2, No such file or directory')
    error = Py4JJavaError(_Java("org.apache.spark.SparkException: Job aborted.", _Java("wrapped", root)))
    assert spark_error_message(error) == ('java.io.IOException: Cannot run program "./env/bin/python": error=2, '
                                          "No such file or directory")
    worker = _Java("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
                   '  File "x.py", line 1, in f\nZeroDivisionError: division by zero\n')
    assert spark_error_message(Py4JJavaError(worker)) == "ZeroDivisionError: division by zero"


def test_transient_errors_are_tried_again_then_given_up():
    calls, retries = [], []

    def busy():
        calls.append(1)
        raise DatabaseError("database is locked", transient=True)

    with pytest.raises(DatabaseError):
        with_retries(busy, attempts=3, first_pause=0.001, on_retry=lambda e, n: retries.append(n))
    assert len(calls) == 3 and retries == [1, 2]


def test_a_transient_error_that_passes_is_not_an_error():
    outcomes = iter([DatabaseError("deadlock detected", transient=True), None])

    def flaky():
        e = next(outcomes)
        if e:
            raise e
        return "applied"

    assert with_retries(flaky, first_pause=0.001) == "applied"


def test_terminal_errors_are_not_retried():
    calls = []

    def duplicate():
        calls.append(1)
        raise ConstraintViolation("duplicate key", kind="primary_key")

    with pytest.raises(ConstraintViolation):
        with_retries(duplicate, first_pause=0.001)
    assert calls == [1]


@pytest.mark.parametrize("error, code", [
    (ConfigurationError("bad key"), 2),
    (ReportedError(ErrorInfo("invalid_name", "bad name")), 2),
    (SchemaError("no primary key"), 1),
    (ReportedError(ErrorInfo("connection", "unreachable", transient=True)), 1),
])
def test_the_cli_exit_code_follows_the_error_code(error, code):
    assert exit_code(error) == code
