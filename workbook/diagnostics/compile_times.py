"""How long each translation unit took to compile, read from the ninja logs under build/.

    python -m workbook.diagnostics.compile_times            # every build folder under build/
    python -m workbook.diagnostics.compile_times --links    # link steps too
    python -m workbook.diagnostics.compile_times build/torch_extensions/wb_scatter

ninja appends one line per finished step to `.ninja_log` in the build folder (formats v5 and v6:
start ms, end ms, mtime, output, command hash, tab-separated). A rebuilt output gets a new line; the
last one is the latest build and is what `last s` shows (a ccache hit takes well under a second), and
`slowest s` is the slowest build of it still in the log, usually the cold one.

`header_cost(includes + source)` answers a different question: how long does one tiny source take to
compile cold with a given set of #includes? It calls the compiler directly (ccache off), counts the CPU
seconds the compile used (on a busy machine the wall clock would count other programs too), measures once
per machine and keeps the seconds and the preprocessed line count in build/compile_costs.json, keyed by
compiler version, torch version, flags and source text; `remeasure=True` measures again.
`preprocessed_size` and `syntax_error` keep their answers in the same file the same way: chapter 09's
header exercise asks them about the same few sources again and again, and each syntax check parses
the whole of torch's headers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workbook import BUILD_DIR, build, relative_to_repo
from workbook.build import errors

OBJECT_SUFFIXES = (".o", ".obj")
COSTS_FILE = BUILD_DIR / "compile_costs.json"
# The op chapters 02 and 09 compile with different headers (only compiled, never loaded).
TINY_OP = r"""
at::Tensor twice(const at::Tensor& x) { return x.mul(2); }
TORCH_LIBRARY_FRAGMENT(wb_headers, m) { m.def("twice(Tensor x) -> Tensor", &twice); }
"""


@dataclass(frozen=True)
class StepTime:
    build_folder: Path
    output: str
    last_seconds: float
    slowest_seconds: float
    builds: int

    @property
    def is_compile(self) -> bool:
        return self.output.endswith(OBJECT_SUFFIXES)


def read_ninja_log(log_path) -> list[StepTime]:
    """The steps of one .ninja_log, one per output."""
    log_path = Path(log_path)
    lines = log_path.read_text().splitlines()
    if not lines or not lines[0].startswith("# ninja log v"):
        raise ValueError(f"{relative_to_repo(log_path)} is not a ninja log: its first line should be '# ninja log v5'")
    durations: dict[str, list[float]] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise ValueError(
                f"{relative_to_repo(log_path)}, line {number}: expected 5 tab-separated fields "
                f"(start, end, mtime, output, hash), got {len(fields)}"
            )
        start_ms, end_ms, _mtime, output, _hash = fields
        seconds = (int(end_ms) - int(start_ms)) / 1000
        output = output.removeprefix(f"{log_path.parent}/")  # setuptools names its objects by absolute path
        durations.setdefault(output, []).append(seconds)
    return [StepTime(log_path.parent, output, times[-1], max(times), len(times)) for output, times in durations.items()]


def collect(roots, links: bool = False) -> list[StepTime]:
    """Every step recorded in the ninja logs below `roots`, slowest first (by the slowest build)."""
    steps = []
    for root in roots:
        for log_path in sorted(Path(root).rglob(".ninja_log")):
            steps.extend(step for step in read_ninja_log(log_path) if links or step.is_compile)
    return sorted(steps, key=lambda step: (-step.slowest_seconds, str(step.build_folder), step.output))


def format_table(steps: list[StepTime]) -> str:
    if not steps:
        return "no ninja logs with compile steps found (build something first)"
    rows = [
        (
            f"{step.last_seconds:6.1f}",
            f"{step.slowest_seconds:9.1f}",
            f"{step.builds:6d}",
            relative_to_repo(step.build_folder),
            step.output,
        )
        for step in steps
    ]
    folder_width = max(len(row[3]) for row in rows)
    lines = [f"{'last s':>6} {'slowest s':>9} {'builds':>6}  {'build folder':{folder_width}}  output"]
    lines += [
        f"{last} {slowest} {builds}  {folder:{folder_width}}  {output}"
        for last, slowest, builds, folder, output in rows
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class HeaderCost:
    seconds: float  # CPU seconds of one cold compile (-c, ccache off)
    lines: int  # lines of the preprocessed source (-E): what the compiler had to read
    measured_now: bool  # False: taken from the cache file


def compile_flags() -> list[str]:
    """The flags a JIT extension build compiles with that matter for the headers: C++20, -O0, torch's
    and Python's include folders."""
    from torch.utils.cpp_extension import include_paths

    return [
        "-std=c++20",
        "-fPIC",
        "-O0",
        *(f"-isystem{path}" for path in include_paths()),
        f"-isystem{sysconfig.get_paths()['include']}",
    ]


def compiler_command() -> str:
    return os.environ.get("CXX", "c++")


def header_cost(
    source: str, *, remeasure: bool = False, compiler: str | None = None, flags=None, cache_file=COSTS_FILE
) -> HeaderCost:
    """The cold compile time and preprocessed size of `source` (includes and code), cached per machine."""
    compiler = compiler or compiler_command()
    flags = compile_flags() if flags is None else list(flags)
    key_fields = {"timing": "CPU seconds", **_key_fields(compiler, flags, source)}
    entry, measured_now = _cached(key_fields, lambda: _measure(compiler, flags, source), cache_file, remeasure)
    return HeaderCost(entry["seconds"], entry["lines"], measured_now)


def preprocessed_size(source: str, *, compiler: str | None = None, flags=None, cache_file=COSTS_FILE) -> int:
    """The lines of `source` after preprocessing (-E), cached per machine; RuntimeError (with the
    compiler's first error line) when the compiler cannot preprocess it, a missing header say."""
    compiler = compiler or compiler_command()
    flags = compile_flags() if flags is None else list(flags)

    def measure() -> dict:
        with tempfile.TemporaryDirectory(prefix="preprocess_") as folder:
            source_path = Path(folder) / "source.cpp"
            source_path.write_text(source)
            try:
                return {"lines": preprocessed_lines(compiler, flags, source_path)}
            except RuntimeError as error:
                return {"error": str(error)}

    entry, _ = _cached({"kind": "-E", **_key_fields(compiler, flags, source)}, measure, cache_file)
    if "error" in entry:
        raise RuntimeError(entry["error"])
    return entry["lines"]


def syntax_error(source: str, *, compiler: str | None = None, flags=None, cache_file=COSTS_FILE) -> str | None:
    """None when `source` compiles (-fsyntax-only), else the compiler's first error line; cached per
    machine, since the check parses every header the source includes."""
    compiler = compiler or compiler_command()
    flags = compile_flags() if flags is None else list(flags)

    def measure() -> dict:
        with tempfile.TemporaryDirectory(prefix="syntax_") as folder:
            Path(folder, "source.cpp").write_text(source)
            try:
                run_compiler(compiler, [*flags, "-fsyntax-only", "source.cpp"], cwd=folder)
            except RuntimeError as error:
                return {"error": str(error)}
            return {"error": None}

    entry, _ = _cached({"kind": "-fsyntax-only", **_key_fields(compiler, flags, source)}, measure, cache_file)
    return entry["error"]


def _key_fields(compiler: str, flags: list, source: str) -> dict:
    import torch

    return {"compiler": _compiler_version(compiler), "torch": torch.__version__, "flags": flags, "source": source}


def _cached(key_fields: dict, measure, cache_file, remeasure: bool = False) -> tuple[dict, bool]:
    """(the cache entry for `key_fields`, measured now?): `measure()` (a dict) runs only when the entry is
    missing or `remeasure` is set, and is then stored with the key fields."""
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()
    cache_file = Path(cache_file)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    # One compile at a time, across processes: two at once would slow each other's timing down.
    with build.exclusive(cache_file.with_name(cache_file.name + ".lock")):
        entries = json.loads(cache_file.read_text()) if cache_file.exists() else {}
        if key in entries and not remeasure:
            return entries[key], False
        entries[key] = {**key_fields, **measure()}
        cache_file.write_text(json.dumps(entries, indent=1))
    return entries[key], True


def header_costs(include_sets: dict[str, list[str]], remeasure: bool = False) -> dict[str, HeaderCost]:
    """{label: header_cost of TINY_OP after those headers' #include lines} for {label: [header, ...]}."""
    return {
        label: header_cost("".join(f"#include <{header}>\n" for header in headers) + TINY_OP, remeasure=remeasure)
        for label, headers in include_sets.items()
    }


def preprocessed_lines(compiler: str, flags, source_path: Path) -> int:
    return run_compiler(compiler, [*flags, "-E", source_path.name], cwd=source_path.parent).stdout.count("\n")


def _measure(compiler: str, flags, source: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="header_cost_") as folder:
        source_path = Path(folder) / "tiny_op.cpp"
        source_path.write_text(source)
        lines = preprocessed_lines(compiler, flags, source_path)
        start = _children_cpu_seconds()
        run_compiler(compiler, [*flags, "-c", source_path.name, "-o", "tiny_op.o"], cwd=folder)
        return {"seconds": round(_children_cpu_seconds() - start, 2), "lines": lines}


def _children_cpu_seconds() -> float:
    """CPU seconds (user and system) used so far by this process's finished child processes. A compile
    uses one core; counting its CPU time rather than the wall clock keeps other programs on a busy
    machine out of the measurement."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_compiler(compiler: str, arguments, cwd=None) -> subprocess.CompletedProcess:
    """Run the compiler with ccache off (some systems install ccache as `c++` itself) and plain ASCII
    messages; a failure raises RuntimeError with the compiler's first error line."""
    result = subprocess.run(
        [*compiler.split(), *arguments],
        env=dict(os.environ, CCACHE_DISABLE="1", LC_ALL="C"),
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{compiler} failed: {errors.first_compiler_error_line(result.stderr)}")
    return result


def _compiler_version(compiler: str) -> str:
    return run_compiler(compiler, ["--version"]).stdout.splitlines()[0]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "roots",
        nargs="*",
        type=Path,
        default=[BUILD_DIR],
        help="folders searched for .ninja_log files (default: build/)",
    )
    parser.add_argument("--links", action="store_true", help="list link steps as well as compiled objects")
    arguments = parser.parse_args(argv)
    print(format_table(collect(arguments.roots, links=arguments.links)))


if __name__ == "__main__":
    main()
