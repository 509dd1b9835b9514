"""The child process that runs the cases, and the parent side that restarts it after a crash (see the
package docstring): run_cases in the parent, child_main in `python -m workbook.fuzz JOURNAL`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from workbook import REPO_ROOT
from workbook.fuzz import families
from workbook.fuzz.compare import Mismatch, names_argument
from workbook.fuzz.recipes import case_arguments

CHILD_TIMEOUT_S = 300


def run_case(case: dict):
    """Run one case; raises Mismatch when the result or the error is not what the case expects."""
    args = case_arguments(case)
    try:
        if case["family"] == "abort":  # the runner's self-check: a case that kills the process
            os.abort()
        result = families.call(case, args)
    except Exception as error:  # noqa: BLE001 - any exception is an answer; its message is what we judge
        message = f"{type(error).__name__}: {error}"
        if case["expect"] == "error" and names_argument(message, case["names"]):
            return "raised, naming " + "/".join(case["names"])
        raise Mismatch(
            f"raised {message.splitlines()[0][:400]}"
            + (f" (expected it to name {case['names']})" if case["expect"] == "error" else " (expected a result)")
        ) from None
    if case["expect"] == "error":
        raise Mismatch(f"returned a result, expected an error naming one of {case['names']}")
    families.check_result(case, args, case_arguments(case, on_cpu=True), result)
    return "matches the reference"


def load_libraries():
    """Build (or reuse) and load every compiled library the cases call. The test calls it before
    starting a child, so that the child's time limit is spent on cases, not on a cold build."""
    from workbook import build
    from workbook.ops import lltm, scatter, warp_perspective

    scatter.load()
    lltm.load_extension()
    warp_perspective.load_ops()
    build.load("wb_setup_check", ["csrc/setup_check/add_one.cpp"], is_python_module=False)


def child_main(journal: str) -> int:
    import warnings

    warnings.simplefilter("ignore")  # TorchScript deprecations, autograd fallback notes: not results
    load_libraries()
    families.box_blur_op()
    cases = json.load(sys.stdin)
    with open(journal, "a") as log:
        for number, case in enumerate(cases):
            log.write(f"{number}\n")
            log.flush()
            try:
                detail, ok = run_case(case), True
            except Mismatch as mismatch:
                detail, ok = str(mismatch), False
            except Exception as error:  # noqa: BLE001 - a bug in the case's checking code
                detail, ok = f"checking the case failed: {type(error).__name__}: {error}", False
            print(json.dumps({"ok": ok, "detail": detail}), flush=True)
    return 0


def run_cases(cases: list[dict], *, timeout: float = CHILD_TIMEOUT_S) -> list[dict]:
    """Run `cases` in child processes; one result per case, in order (see the package docstring)."""
    results: list[dict] = []
    while len(results) < len(cases):
        remaining = cases[len(results) :]
        with tempfile.TemporaryDirectory() as folder:
            journal = Path(folder) / "journal"
            journal.touch()
            try:
                child = subprocess.run(
                    [sys.executable, "-m", "workbook.fuzz", str(journal)],
                    input=json.dumps(remaining),
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    cwd=REPO_ROOT,
                    env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
                )
                returncode, stderr = child.returncode, child.stderr
                stdout = child.stdout
            except subprocess.TimeoutExpired as expired:
                returncode, stderr = "timeout", ""
                stdout = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
            started = [int(line) for line in journal.read_text().split()]
        finished = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        results += [{"case": case, **outcome} for case, outcome in zip(remaining, finished)]
        if len(finished) == len(remaining):
            break
        if not started:
            raise RuntimeError(f"the fuzz child failed before running any case (exit {returncode}):\n{stderr[-3000:]}")
        killer = started[-1]
        results.append(
            {
                "case": remaining[killer],
                "ok": False,
                "detail": f"killed the process (exit {returncode}): {stderr.strip()[-600:]}",
            }
        )
    return results
