"""workbook.diagnostics.compile_times: per-translation-unit compile times from ninja logs (synthetic logs here), and the
cached cold compile cost of a source (a fake compiler here, and one trivial real compile)."""

import json
import stat

import pytest

from workbook.diagnostics import compile_times

LOG = (
    "# ninja log v5\n"
    "0\t12500\t1700000000000000000\tscatter_cpu.o\tb3b14d25a2a91a76\n"
    "0\t30250\t1700000000000000001\tscatter.o\t48ae9eb07f934cea\n"
    "30250\t30900\t1700000000000000002\twb_scatter.so\t810c2d0eaa6490eb\n"
    "2\t98\t1700000000000000003\tscatter_cpu.o\tb3b14d25a2a91a76\n"
)


def write_log(folder, text):
    folder.mkdir(parents=True)
    (folder / ".ninja_log").write_text(text)
    return folder / ".ninja_log"


def test_latest_and_slowest_build_of_each_output(tmp_path):
    steps = {step.output: step for step in compile_times.read_ninja_log(write_log(tmp_path / "ext", LOG))}
    assert set(steps) == {"scatter_cpu.o", "scatter.o", "wb_scatter.so"}
    assert (steps["scatter_cpu.o"].last_seconds, steps["scatter_cpu.o"].slowest_seconds) == (0.096, 12.5)
    assert steps["scatter_cpu.o"].builds == 2
    assert steps["scatter.o"].last_seconds == 30.25
    assert not steps["wb_scatter.so"].is_compile


def test_collect_sorts_translation_units_slowest_first_across_folders(tmp_path):
    write_log(tmp_path / "a", LOG)
    write_log(
        tmp_path / "cmake" / "b",
        f"# ninja log v6\n0\t40000\t1\tCMakeFiles/x.dir/ops.cpp.o\tff\n5\t6\t1\t{tmp_path}/cmake/b/sub/setup.o\tee\n",
    )
    steps = compile_times.collect([tmp_path])
    assert [(step.build_folder.name, step.output) for step in steps] == [
        ("b", "CMakeFiles/x.dir/ops.cpp.o"),
        ("a", "scatter.o"),
        ("a", "scatter_cpu.o"),
        ("b", "sub/setup.o"),
    ]
    assert "wb_scatter.so" in {step.output for step in compile_times.collect([tmp_path], links=True)}


def test_printed_table_names_folder_output_and_seconds(tmp_path, capsys):
    write_log(tmp_path / "ext", LOG)
    compile_times.main([str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["last", "s", "slowest", "s", "builds", "build", "folder", "output"]
    assert lines[1].split()[:3] == ["30.2", "30.2", "1"] and lines[1].endswith("scatter.o")
    assert lines[2].split()[:3] == ["0.1", "12.5", "2"] and str(tmp_path / "ext") in lines[2]
    assert len(lines) == 3


def test_not_a_ninja_log_is_named(tmp_path):
    with pytest.raises(ValueError, match="not a ninja log"):
        compile_times.read_ninja_log(write_log(tmp_path / "x", "hello\n"))
    with pytest.raises(ValueError, match="line 2: expected 5 tab-separated fields"):
        compile_times.read_ninja_log(write_log(tmp_path / "y", "# ninja log v5\n1\t2\tfoo\n"))


# ---- header_cost: measured once per machine, cached by compiler, torch, flags and source ----------------
FAKE_COMPILER = """#!/bin/sh
echo "$CCACHE_DISABLE $*" >> "{log}"
case "$*" in
  --version) echo "fakecc {version}";;
  *broken*) echo "tiny_op.cpp:1:10: fatal error: no/such.h: No such file or directory" >&2; exit 1;;
  *-E*) printf 'one\\ntwo\\nthree\\n';;
esac
"""


@pytest.fixture
def fake_compiler(tmp_path):
    def make(version="1.0"):
        path = tmp_path / f"fakecc-{version}"
        path.write_text(FAKE_COMPILER.format(log=tmp_path / "calls.log", version=version))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return str(path)

    return make


def compiles(tmp_path):
    log = tmp_path / "calls.log"
    return [line for line in log.read_text().splitlines() if " -c " in line] if log.exists() else []


def test_measured_once_then_read_from_the_cache(tmp_path, fake_compiler):
    cache = tmp_path / "costs.json"
    first = compile_times.header_cost("int x;", compiler=fake_compiler(), flags=["-O0"], cache_file=cache)
    again = compile_times.header_cost("int x;", compiler=fake_compiler(), flags=["-O0"], cache_file=cache)
    assert first.measured_now and not again.measured_now
    assert (again.seconds, again.lines) == (first.seconds, first.lines) and first.lines == 3
    assert len(compiles(tmp_path)) == 1
    assert all(line.startswith("1 ") for line in compiles(tmp_path)), "the compiler must run with CCACHE_DISABLE=1"
    (entry,) = json.loads(cache.read_text()).values()
    assert entry["compiler"] == "fakecc 1.0" and entry["flags"] == ["-O0"] and entry["source"] == "int x;"
    assert entry["timing"] == "CPU seconds"


def test_remeasure_compiles_again(tmp_path, fake_compiler):
    cache = tmp_path / "costs.json"
    compile_times.header_cost("int x;", compiler=fake_compiler(), flags=[], cache_file=cache)
    assert compile_times.header_cost(
        "int x;", compiler=fake_compiler(), flags=[], cache_file=cache, remeasure=True
    ).measured_now
    assert len(compiles(tmp_path)) == 2


@pytest.mark.parametrize("change", ["source", "flags", "compiler version"])
def test_a_different_key_is_measured_anew(tmp_path, fake_compiler, change):
    cache = tmp_path / "costs.json"
    compile_times.header_cost("int x;", compiler=fake_compiler(), flags=["-O0"], cache_file=cache)
    arguments = {"source": "int x;", "compiler": fake_compiler(), "flags": ["-O0"]}
    arguments.update(
        {
            "source": {"source": "int y;"},
            "flags": {"flags": ["-O2"]},
            "compiler version": {"compiler": fake_compiler("2.0")},
        }[change]
    )
    source = arguments.pop("source")
    assert compile_times.header_cost(source, cache_file=cache, **arguments).measured_now
    assert len(json.loads(cache.read_text())) == 2


def test_a_failing_compile_names_the_first_error_and_caches_nothing(tmp_path, fake_compiler):
    cache = tmp_path / "costs.json"
    with pytest.raises(RuntimeError, match="fatal error: no/such.h"):
        compile_times.header_cost("int x;", compiler=fake_compiler(), flags=["-Dbroken"], cache_file=cache)
    assert not cache.exists()


def test_preprocessed_size_and_syntax_error_are_cached_with_their_failures(tmp_path, fake_compiler):
    cache, compiler = tmp_path / "costs.json", fake_compiler()
    for _ in range(2):
        assert compile_times.preprocessed_size("int x;", compiler=compiler, flags=[], cache_file=cache) == 3
        assert compile_times.syntax_error("int x;", compiler=compiler, flags=[], cache_file=cache) is None
        with pytest.raises(RuntimeError, match="fatal error: no/such.h"):
            compile_times.preprocessed_size("int x;", compiler=compiler, flags=["-Dbroken"], cache_file=cache)
        error = compile_times.syntax_error("int x;", compiler=compiler, flags=["-Dbroken"], cache_file=cache)
        assert "fatal error: no/such.h" in error
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert sum(" -E " in f" {line} " for line in calls) == 2, "each -E ran once, then came from the cache"
    assert sum("-fsyntax-only" in line for line in calls) == 2
    assert {entry["kind"] for entry in json.loads(cache.read_text()).values()} == {"-E", "-fsyntax-only"}


def test_a_real_compile_of_a_trivial_source(tmp_path):
    cost = compile_times.header_cost(
        "#include <cstddef>\nstd::size_t answer() { return 42; }\n",
        flags=["-std=c++20"],
        cache_file=tmp_path / "costs.json",
    )
    assert cost.measured_now and cost.seconds > 0 and cost.lines > 10


def test_a_compile_is_timed_in_cpu_seconds_not_by_the_clock(tmp_path):
    sleepy = tmp_path / "sleepycc"
    sleepy.write_text('#!/bin/sh\ncase "$*" in --version) echo sleepycc 1;; *-E*) echo one;; *) sleep 0.4;; esac\n')
    sleepy.chmod(sleepy.stat().st_mode | stat.S_IEXEC)
    cost = compile_times.header_cost("int x;", compiler=str(sleepy), flags=[], cache_file=tmp_path / "costs.json")
    assert cost.seconds < 0.2, "a compiler that waits 0.4 s without working used well under that of CPU"


def test_header_costs_compile_the_tiny_op_after_each_include_set(monkeypatch):
    sources = []
    monkeypatch.setattr(
        compile_times, "header_cost", lambda source, remeasure: sources.append((source, remeasure)) or len(sources)
    )
    costs = compile_times.header_costs(
        {"lean": ["ATen/core/Tensor.h", "torch/library.h"], "full": ["torch/all.h"]}, remeasure=True
    )
    assert costs == {"lean": 1, "full": 2}
    assert sources == [
        ("#include <ATen/core/Tensor.h>\n#include <torch/library.h>\n" + compile_times.TINY_OP, True),
        ("#include <torch/all.h>\n" + compile_times.TINY_OP, True),
    ]
