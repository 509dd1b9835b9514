"""How long each translation unit took to compile, read from the ninja logs under build/.

    python -m workbook.compile_times            # every build folder under build/
    python -m workbook.compile_times --links    # link steps too
    python -m workbook.compile_times build/torch_extensions/wb_scatter

ninja appends one line per finished step to `.ninja_log` in the build folder (formats v5 and v6:
start ms, end ms, mtime, output, command hash, tab-separated). A rebuilt output gets a new line; the
last one is the latest build and is what `last s` shows (a ccache hit takes well under a second), and
`slowest s` is the slowest build of it still in the log, usually the cold one.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from . import BUILD_DIR, relative_to_repo

OBJECT_SUFFIXES = (".o", ".obj")


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
            raise ValueError(f"{relative_to_repo(log_path)}, line {number}: expected 5 tab-separated fields "
                             f"(start, end, mtime, output, hash), got {len(fields)}")
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
    rows = [(f"{step.last_seconds:6.1f}", f"{step.slowest_seconds:9.1f}", f"{step.builds:6d}",
             relative_to_repo(step.build_folder), step.output) for step in steps]
    folder_width = max(len(row[3]) for row in rows)
    lines = [f"{'last s':>6} {'slowest s':>9} {'builds':>6}  {'build folder':{folder_width}}  output"]
    lines += [f"{last} {slowest} {builds}  {folder:{folder_width}}  {output}" for last, slowest, builds, folder, output in rows]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", type=Path, default=[BUILD_DIR],
                        help="folders searched for .ninja_log files (default: build/)")
    parser.add_argument("--links", action="store_true", help="list link steps as well as compiled objects")
    arguments = parser.parse_args(argv)
    print(format_table(collect(arguments.roots, links=arguments.links)))


if __name__ == "__main__":
    main()
