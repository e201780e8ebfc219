"""A step's code and its errors: compiled with its own file name (tracebacks then show the step's
lines), run as a Python step's `run(spark, ...)` program with the run's context in its globals
(`changes('ns.table')`, compute/run/lineage.py `Increments`), and every error described in one line
a person can read. The only code compiled on a unit is users' steps and the project's own probes
(`run_probe`, for its tests and benchmarks), both here.
"""

from __future__ import annotations

import linecache
import traceback
from collections.abc import Callable
from typing import Any

import httpx

from compute.contract import Step


def compile_step(step: Step):
    filename = f"<step {step.name}>"
    code = compile(step.code, filename, "exec")
    # Tracebacks then show the step's own lines.
    linecache.cache[filename] = (
        len(step.code),
        None,
        step.code.splitlines(keepends=True),
        filename,
    )
    return code


def step_traceback(error: BaseException) -> str:
    """The traceback from the step's own code down, without the runner's frames."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename.startswith("<step ")
    ]
    lines = (
        ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    )
    return "".join(lines + traceback.format_exception_only(type(error), error)).rstrip()


def run_compiled(code, namespace: dict[str, Any]) -> None:
    """Run a step's compiled code (compile_step) in `namespace`: the one place a unit runs code
    that came as text, a user's step or one of the project's probes."""
    exec(code, namespace)


def python_program(step: Step, code, context: dict[str, Any] | None = None) -> Callable:
    """The step's `run`, its code run with `context` in its globals: what the run offers a
    step besides `spark` and earlier steps (`changes`, its incremental reads)."""
    namespace: dict[str, Any] = {**(context or {}), "__name__": f"lakeport_step_{step.name}"}
    run_compiled(code, namespace)
    program = namespace.get("run")
    if not callable(program):
        raise ValueError("a Python step must define run(spark, ...) returning a DataFrame")
    return program


def run_probe(spark, args: dict, progress) -> Any:
    """A probe of the project's tests and benchmarks (JobKind.PROBE): its source
    (`args["code"]`) compiled as a step's is and run with `spark`, its own `args` and `progress`
    in scope; its `result` is the run's."""
    step = Step(name="probe", kind="python", code=str(args["code"]))
    namespace: dict[str, Any] = {
        "__name__": "lakeport_probe",
        "spark": spark,
        "args": dict(args.get("args") or {}),
        "progress": progress,
    }
    try:
        run_compiled(compile_step(step), namespace)
        return namespace.get("result")
    finally:
        # What the probe left in reference cycles goes with it, not whenever the collector runs.
        namespace.clear()


def syntax_error(step: Step, error: Exception) -> str:
    if isinstance(error, SyntaxError):
        return f"step {step.name!r}: syntax error at line {error.lineno}: {error.msg}"
    return f"step {step.name!r}: {describe(error)}"


def describe(error: BaseException) -> str:
    """One line for a person: the error's type and the first line of its message."""
    java_exception = getattr(error, "java_exception", None)
    text = str(java_exception.toString()) if java_exception is not None else str(error)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if java_exception is None:
        first = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return first if len(first) <= 500 else first[:500] + "…"


def catalog_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
