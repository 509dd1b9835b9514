"""workbook.compile_times: per-translation-unit compile times from ninja logs (synthetic logs here)."""
import pytest

from workbook import compile_times

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
    write_log(tmp_path / "cmake" / "b", "# ninja log v6\n0\t40000\t1\tCMakeFiles/x.dir/ops.cpp.o\tff\n"
                                        f"5\t6\t1\t{tmp_path}/cmake/b/sub/setup.o\tee\n")
    steps = compile_times.collect([tmp_path])
    assert [(step.build_folder.name, step.output) for step in steps] == [
        ("b", "CMakeFiles/x.dir/ops.cpp.o"), ("a", "scatter.o"), ("a", "scatter_cpu.o"), ("b", "sub/setup.o")]
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
