"""Compile-only checks of CUDA kernels, for machines without a GPU (or without a CUDA build of torch).

    python -m workbook.diagnostics.cuda_check              # every .cu under csrc/
    python -m workbook.diagnostics.cuda_check path/to.cu   # just these
    python -m workbook.diagnostics.cuda_check -j 2         # two nvcc processes at a time

A CPU-only torch refuses to build CUDA extensions, but its wheel still ships the headers a kernel
needs (ATen, c10/cuda, torch/library.h). So each `.cu` is compiled, not linked, with

    nvcc -c -std=c++20 -arch=sm_90 -Xcompiler -fPIC <torch's include dirs> csrc/cuda_stub ...

which parses and type-checks the host code and generates device code for one GPU architecture:
a syntax error, a type error, a host function called from a kernel all fail here exactly as they
would in the real build. (`csrc/cuda_stub` supplies the one generated header the CPU wheel lacks;
it comes last on the include path, so a CUDA build of torch uses its own.)

nvcc needs 20-60 s per file against torch's headers, so results are cached under
`build/cuda_check/`: a file is compiled again only when its text, one of the headers it includes
(found by nvcc's dependency output and compared by content), the flags, nvcc or torch changed.
A failure is cached too, as long as neither the file, nor a header beside it or in csrc/, changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from workbook import BUILD_DIR, CSRC_DIR, REPO_ROOT, relative_to_repo
from workbook.build import exclusive, progress_line
from workbook.build.errors import first_compiler_error

CACHE_DIR = BUILD_DIR / "cuda_check"
STUB_INCLUDE_DIR = CSRC_DIR / "cuda_stub"
ARCH = "sm_90"
_CACHE_FORMAT = 1
_HEADER_SUFFIXES = {".h", ".hpp", ".cuh", ".inl"}

_ERROR_LINE = re.compile(
    r"(\(\d+\): (catastrophic )?error\b|:\d+(:\d+)?: (fatal )?error\b|\berror\b\s*:)", re.IGNORECASE
)

OK, FAILED, SKIPPED = "compiles", "does not compile", "skipped"


class CudaCompileError(RuntimeError):
    """Raised by `CompileResult.require()` when a kernel does not compile."""


@dataclass(frozen=True)
class CompileResult:
    """What nvcc said about one source file."""

    source: str  # as learners should see it: relative to the repository when inside it
    status: str  # OK, FAILED or SKIPPED
    first_error: str = ""  # the first error with its source excerpt (FAILED), or why (SKIPPED)
    log: str = ""  # nvcc's full output (warnings included)
    seconds: float = 0.0  # how long nvcc ran (0 when the result came from the cache)
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def skipped(self) -> bool:
        return self.status == SKIPPED

    def require(self) -> CompileResult:
        if self.status == FAILED:
            raise CudaCompileError(str(self))
        return self

    def __str__(self) -> str:
        if self.status == OK:
            return f"✔ {self.source}: compiles"
        if self.status == SKIPPED:
            return f"○ {self.source}: not compiled — {self.first_error}"
        return f"✘ {self.source}: does not compile. nvcc's first error:\n{self.first_error}"

    __repr__ = __str__


# --- the toolchain -----------------------------------------------------------------------------


def find_nvcc() -> str | None:
    """nvcc from PATH, else from $CUDA_HOME / $CUDA_PATH, else from /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and Path(root, "bin", "nvcc").is_file():
            return str(Path(root, "bin", "nvcc"))
    return None


def nvcc_missing_reason() -> str:
    return (
        "nvcc not found: install the CUDA toolkit (or put its bin/ on PATH, or set CUDA_HOME) to compile-check kernels"
    )


_version_cache: dict[str, str] = {}


def nvcc_version(nvcc: str | None = None) -> str:
    """'13.0' for nvcc 13.0; '' without nvcc."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        return ""
    if nvcc not in _version_cache:
        output = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        match = re.search(r"release (\d+\.\d+)", output)
        _version_cache[nvcc] = match.group(1) if match else output.strip().splitlines()[-1]
    return _version_cache[nvcc]


def torch_include_dirs() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return list(include_paths())


def compile_flags(extra_flags=()) -> list[str]:
    """The flags the check passes to nvcc (besides includes, input and output)."""
    import torch
    from torch.utils import cpp_extension

    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return [
        "-c",
        "-std=c++20",
        f"-arch={ARCH}",
        "-Xcompiler",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        # the same macros torch's own build (cpp_extension) uses for .cu files
        *cpp_extension.COMMON_NVCC_FLAGS,
        *extra_flags,
    ]


def cuda_sources_in_repo() -> list[Path]:
    """Every .cu file under csrc/, sorted."""
    return sorted(CSRC_DIR.rglob("*.cu"))


# --- compiling, with the cache -----------------------------------------------------------------


def compile_check(source, *, extra_flags=(), include_dirs=(), cache_dir=None, use_cache=True) -> CompileResult:
    """Compile one .cu file with nvcc (no linking) and report whether it compiles.

    `source` is a path (relative ones are taken from the repository root). `include_dirs` are added
    before torch's. Results are reused from `cache_dir` (default build/cuda_check) when nothing
    the compile depends on changed.
    """
    path = Path(source)
    if not path.is_absolute():
        path = REPO_ROOT / path
    shown = relative_to_repo(path)
    nvcc = find_nvcc()
    if nvcc is None:
        return CompileResult(shown, SKIPPED, nvcc_missing_reason())
    if not path.is_file():
        raise FileNotFoundError(f"no such CUDA source: {shown}")

    import torch

    includes = [str(Path(d).resolve()) for d in include_dirs] + torch_include_dirs() + [str(STUB_INCLUDE_DIR)]
    flags = compile_flags(extra_flags)
    key = _digest(
        json.dumps([_CACHE_FORMAT, nvcc_version(nvcc), torch.__version__, flags, includes]).encode()
        + b"\0"
        + path.read_bytes()
    )
    entry = Path(cache_dir or CACHE_DIR) / f"{path.stem}-{_digest(str(path).encode())[:12]}"
    entry.mkdir(parents=True, exist_ok=True)
    with exclusive(entry / "lock"):
        record = _read_record(entry / "record.json")
        if use_cache and record and record["key"] == key and _dependencies_unchanged(record["dependencies"]):
            return CompileResult(shown, record["status"], record["first_error"], record["log"], 0.0, True)
        result, dependencies = _run_nvcc(nvcc, path, shown, flags, includes, entry)
        if dependencies is not None:
            _write_record(entry / "record.json", key, result, dependencies)
        return result


def check_all(sources=None, *, jobs: int = 1, **options) -> list[CompileResult]:
    """`compile_check` for each source (default: every .cu under csrc/), `jobs` at a time."""
    sources = cuda_sources_in_repo() if sources is None else list(sources)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda s: compile_check(s, **options), sources))


def _run_nvcc(nvcc, path: Path, shown: str, flags, includes, entry: Path):
    """Run nvcc; return the result and the dependencies to key a cache record on (None: do not cache)."""
    depfile = entry / "deps.d"
    depfile.unlink(missing_ok=True)
    command = [
        nvcc,
        *flags,
        *(f"-I{d}" for d in includes),
        "-MD",
        "-MF",
        str(depfile),
        str(path),
        "-o",
        str(entry / "kernel.o"),
    ]
    environment = dict(os.environ, LC_ALL="C")
    started = time.perf_counter()
    try:
        with progress_line.shown(shown):
            completed = subprocess.run(command, capture_output=True, text=True, cwd=path.parent, env=environment)
    except OSError as error:
        return CompileResult(shown, SKIPPED, f"could not run nvcc: {error}"), None
    seconds = time.perf_counter() - started
    log = _readable(completed.stdout + completed.stderr, path)
    (entry / "kernel.o").unlink(missing_ok=True)  # only the verdict is kept, not the object file
    if completed.returncode == 0:
        dependencies = _parse_depfile(depfile, path) if depfile.exists() else None
        return CompileResult(shown, OK, "", log, seconds), _fingerprints(dependencies or [path])
    first = first_compiler_error(log)
    if completed.returncode < 0 or not _ERROR_LINE.search(log):
        # killed, or crashed without a diagnostic: say so, and do not remember it
        why = f"nvcc stopped with exit status {completed.returncode}" + (f":\n{first}" if first else "")
        return CompileResult(shown, FAILED, why, log, seconds), None
    # A failed compile writes no dependency list: key the failure on the file and the headers nearby.
    nearby = {p for folder in (path.parent, CSRC_DIR) for p in folder.rglob("*") if p.suffix in _HEADER_SUFFIXES}
    return CompileResult(shown, FAILED, first, log, seconds), _fingerprints([path, *sorted(nearby)])


def _readable(text: str, source: Path) -> str:
    """nvcc's output with paths shortened: the source as shown to learners, torch's headers as <torch>/."""
    import torch

    text = text.replace(str(source), relative_to_repo(source))
    text = text.replace(str(Path(torch.__file__).parent / "include") + os.sep, "<torch>/include/")
    return text.replace(str(REPO_ROOT) + os.sep, "")


def _parse_depfile(depfile: Path, source: Path) -> list[Path]:
    text = depfile.read_text().replace("\\\n", " ")
    _, _, rest = text.partition(":")
    paths = [Path(word) for word in shlex.split(rest.split("\n\n")[0].split("\n")[0])]
    resolved = [p if p.is_absolute() else (source.parent / p) for p in paths]
    return sorted({p.resolve() for p in resolved} | {source.resolve()})


def _fingerprints(paths) -> dict[str, list]:
    fingerprints = {}
    for path in paths:
        stat = path.stat()
        fingerprints[str(path)] = [stat.st_mtime_ns, stat.st_size, _digest(path.read_bytes())]
    return fingerprints


def _dependencies_unchanged(dependencies: dict) -> bool:
    for name, (mtime, size, digest) in dependencies.items():
        path = Path(name)
        try:
            stat = path.stat()
        except OSError:
            return False
        if stat.st_size != size:
            return False
        if stat.st_mtime_ns != mtime and _digest(path.read_bytes()) != digest:
            return False
    return True


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_record(path: Path):
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("format") == _CACHE_FORMAT else None


def _write_record(path: Path, key: str, result: CompileResult, dependencies: dict) -> None:
    record = {
        "format": _CACHE_FORMAT,
        "key": key,
        "status": result.status,
        "first_error": result.first_error,
        "log": result.log,
        "seconds": round(result.seconds, 1),
        "dependencies": dependencies,
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record))
    temporary.replace(path)


# --- command line ------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", help=".cu files (default: every .cu under csrc/)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="nvcc processes at a time (default 1)")
    parser.add_argument("--no-cache", action="store_true", help="compile even when a cached result is valid")
    parser.add_argument("-v", "--verbose", action="store_true", help="print nvcc's whole output for each file")
    parser.add_argument("--cache-dir", help=f"where results are kept (default {relative_to_repo(CACHE_DIR)})")
    args = parser.parse_args(argv)
    sources = args.sources or cuda_sources_in_repo()
    if not sources:
        print("no .cu files under csrc/")
        return 0
    nvcc = find_nvcc()
    if nvcc:
        print(f"nvcc {nvcc_version(nvcc)}, -arch={ARCH}, compile only (no linking, nothing runs)")
    failed = 0
    for result in check_all(sources, jobs=args.jobs, use_cache=not args.no_cache, cache_dir=args.cache_dir):
        timing = " (cached)" if result.cached else (f" ({result.seconds:.0f} s)" if result.seconds else "")
        print(f"{result}{timing}" if result.ok else str(result))
        if args.verbose and result.log.strip():
            print(result.log.rstrip())
        failed += result.status == FAILED
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
