"""Exercise checks of chapter 04: they pass on the solutions, say "not attempted" on the stubs, and reject a
catalogue of plausible wrong and cheating answers (WRONG_ANSWERS), each with a message that says what is
wrong.

The solutions are the exercise cells of solutions/04_building_and_packaging.ipynb, run here as they are
(tests/solution_cells.py).
"""

import pytest
import wrong_answers
from solution_cells import failed_with, run_solution_cell
from wrong_answers import WrongAnswer

from workbook import build
from workbook.course import generate
from workbook.course.checking import Mistake
from workbook.exercises import ch04
from workbook.ops import lltm

# ---- the solutions pass, the stubs are not attempted, and the messages name the mistake ----------


def test_gxx_check_passes_on_the_solution():
    solution = run_solution_cell("04_building_and_packaging", "ex4_1")["gxx_command"]
    assert ch04.check_gxx_command(solution).passed


@pytest.mark.parametrize(
    "mistake, words",
    [
        (lambda c: [w for w in c if not w.startswith("-I")], ("cannot find torch's headers", "include_paths")),
        (lambda c: [w for w in c if w != "-lc10"], ("link it with -lc10",)),
        (lambda c: [w for w in c if not w.startswith("-D_GLIBCXX")], ("-D_GLIBCXX_USE_CXX11_ABI=",)),
        (lambda c: [w for w in c if not w.startswith("-std")], ("C++20", "-std=c++20")),
        (lambda c: " ".join(c), ("list of strings",)),
        (lambda c: [*c, "-fsyntax-only"], ("wrote no program",)),
    ],
)
def test_gxx_check_explains_what_is_missing(mistake, words):
    solution = run_solution_cell("04_building_and_packaging", "ex4_1")["gxx_command"]
    failed_with(ch04.check_gxx_command(lambda source, output: mistake(solution(source, output))), *words)


def test_lltm_extension_check_passes_on_the_solution_and_a_variant():
    solution = run_solution_cell("04_building_and_packaging", "ex4_2")
    assert ch04.check_lltm_extension(solution["lltm_extension"]).passed
    assert _lltm()().passed


def _plain_extension(**arguments):
    from setuptools import Extension

    return Extension(**arguments)


SIMD_FLAGS = [flag for flag in lltm.cpu_flags() if not flag.startswith("-O")]


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"name": "wb_lltm"}, ("'wb_lltm._C'",)),
        ({"sources": ["lltm.cpp", "cpu/lltm_cpu.cpp"]}, ("lltm_python.cpp", "PyInit__C")),
        ({"sources": ["lltm_python.cpp", "cpu/lltm_cpu.cpp"]}, ("lltm.cpp", "TORCH_LIBRARY")),
        ({"sources": ["lltm.cpp", "lltm_python.cpp", "cpu/lltm.cpp"]}, ("no csrc/lltm/cpu/lltm.cpp",)),
        ({"sources": ["lltm.cpp", "lltm_python.cpp", "cpu/lltm_cpu.cpp", "cuda/lltm_cuda.cu"]}, ("remove",)),
        pytest.param(
            {"extra_compile_args": ["-O3", "-fopenmp"]},
            ("without lltm.cpu_flags()", "SIMD"),
            marks=pytest.mark.skipif(not SIMD_FLAGS, reason="this CPU gets no SIMD flags (no AVX2)"),
        ),
    ],
)
def test_lltm_extension_check_explains_what_is_wrong(changes, words):
    failed_with(_lltm(**changes)(), *words)


def test_lltm_extension_check_wants_a_cpp_extension_and_reports_the_stub():
    import torch.utils.cpp_extension as cpp_extension

    arguments = {"name": "wb_lltm._C", "sources": ["lltm.cpp", "lltm_python.cpp", "cpu/lltm_cpu.cpp"]}
    failed_with(ch04.check_lltm_extension(lambda: _plain_extension(**arguments)), "torch's include folders")
    failed_with(ch04.check_lltm_extension(lambda: "wb_lltm._C"), "should return a setuptools Extension")
    assert isinstance(cpp_extension.CppExtension(**arguments), object)

    def stub():
        raise NotImplementedError("not attempted yet")

    assert ch04.check_lltm_extension(stub).status == "not attempted yet"


def test_app_cmake_check_passes_on_the_solution_and_on_variants():
    solution = _app_cmake_text()
    assert ch04.check_app_cmake(lambda: solution).passed
    features = (
        solution.replace("set(CMAKE_CXX_STANDARD 20)", "") + "target_compile_features(scatter_app PRIVATE cxx_std_20)\n"
    )
    features = features.replace("find_package(Torch REQUIRED)", "find_package(Torch REQUIRED CONFIG)  # libtorch")
    assert ch04.check_app_cmake(lambda: features).passed, str(ch04.check_app_cmake(lambda: features))
    # --no-as-needed for the whole link line works as well
    options = solution.replace("-Wl,--no-as-needed wb_scatter -Wl,--as-needed", "wb_scatter")
    options += "target_link_options(scatter_app PRIVATE -Wl,--no-as-needed)\n"
    assert ch04.check_app_cmake(lambda: options).passed, str(ch04.check_app_cmake(lambda: options))
    # the library target made of the ten .cpp files one by one, not of the two unity files that include them
    one_by_one = solution.replace(
        "add_subdirectory(../scatter wb_scatter)  # defines the library target wb_scatter\n", ""
    )
    one_by_one += f"add_library(wb_scatter SHARED {' '.join('../scatter/' + f for f in TEN_FILES)})\n"
    one_by_one += WITH_OPENMP
    assert ch04.check_app_cmake(lambda: one_by_one).passed, str(ch04.check_app_cmake(lambda: one_by_one))


# csrc/scatter's library: the six files scatter_unity.cpp includes, and the four loop files compiled apart
SIX_FILES = ["scatter.cpp", "checks.cpp", "autograd.cpp", "autograd_sum_mean.cpp", "autograd_min_max.cpp"]
SIX_FILES += ["cpu/scatter_cpu.cpp"]
TEN_FILES = SIX_FILES + [f"cpu/scatter_cpu_{reduction}.cpp" for reduction in ("sum", "mean", "min", "max")]
WITH_OPENMP = (
    "find_package(OpenMP REQUIRED)\ntarget_link_libraries(wb_scatter PRIVATE ${TORCH_LIBRARIES} OpenMP::OpenMP_CXX)\n"
)


def _wb_scatter_objects(*sources, flags="-O3 -DNDEBUG -fPIC -fopenmp -std=gnu++20", target="wb_scatter"):
    """build.ninja statements as CMake writes them for the objects of `target`, one per source path."""
    return "".join(
        f"build {target}/CMakeFiles/{target}.dir{source}.o: CXX_COMPILER__{target}_Release {source}\n  FLAGS = {flags}\n\n"
        for source in sources
    )


LIBRARY = ["/src/scatter/scatter_unity.cpp"]
LIBRARY += [f"/src/scatter/cpu/scatter_cpu_{reduction}.cpp" for reduction in ("sum", "mean", "min", "max")]


def test_the_library_check_reads_every_object_and_its_flags(tmp_path):
    check = ch04._check_library_sources
    check(_wb_scatter_objects(*LIBRARY))
    check(_wb_scatter_objects(*LIBRARY) + _wb_scatter_objects("/src/scatter/cuda/scatter_cuda.cu", flags="-O3"))
    one_by_one = ["/src/scatter/" + file for file in TEN_FILES]
    check(_wb_scatter_objects(*one_by_one))
    with pytest.raises(Mistake, match=r"missing: checks\.cpp\)"):  # a file whose name ends like one of the ten
        check(_wb_scatter_objects(*[path.replace("/checks.cpp", "/my_checks.cpp") for path in one_by_one]))
    for flags in ("-O3 -fopenmp-simd", "-fopenmp -O3 -fno-openmp"):
        with pytest.raises(Mistake, match="compiles /src/scatter/cpu/scatter_cpu_max.cpp without -fopenmp"):
            check(_wb_scatter_objects(*LIBRARY[:-1]) + _wb_scatter_objects(LIBRARY[-1], flags=flags))
    # another target whose name ends in wb_scatter is not the library
    check(_wb_scatter_objects(*LIBRARY) + _wb_scatter_objects(LIBRARY[1], target="my_wb_scatter"))
    # CMAKE_UNITY_BUILD: CMake compiles a source of its own that includes the target's sources
    unity = tmp_path / "wb_scatter.dir" / "Unity" / "unity_0_cxx.cxx"
    unity.parent.mkdir(parents=True)
    unity.write_text("".join(f'/* generated */\n#include "{source}"\n' for source in LIBRARY))
    check(_wb_scatter_objects(str(unity)))
    unity.write_text("".join(f'#include "{source}"\n' for source in LIBRARY[1:]))
    with pytest.raises(Mistake, match="missing: autograd.cpp"):
        check(_wb_scatter_objects(str(unity)))


def test_the_library_check_knows_the_ten_files_through_the_unity_file():
    sources = ch04._library_sources()
    assert sources[0] == "scatter_unity.cpp" and ch04._files_compiled_by(sources[0]) == set(SIX_FILES)
    assert sorted(set().union(*map(ch04._files_compiled_by, sources))) == sorted(TEN_FILES)


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("find_package(Torch REQUIRED)", "# find_package(Torch REQUIRED)", ("find_package(Torch REQUIRED)",)),
        ("set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD 17)", ("C++20", "asks for C++17")),
        ("set(CMAKE_CXX_STANDARD 20)", "", ("C++20", "no standard")),
        (
            "add_executable(scatter_app app.cpp)",
            "add_executable(app app.cpp)",
            ("add_executable(scatter_app app.cpp)",),
        ),
        ("${TORCH_LIBRARIES} ", "", ("${TORCH_LIBRARIES} is missing",)),
        (" -Wl,--no-as-needed wb_scatter -Wl,--as-needed", "", ("wb_scatter is missing",)),
        (
            "set(CMAKE_CXX_STANDARD 20)",
            "target_compile_features(scatter_app PRIVATE cxx_std_20)",
            ("comes before add_executable(scatter_app",),
        ),
    ],
)
def test_app_cmake_check_explains_each_mistake(old, new, words):
    text = _app_cmake_text()
    assert old in text
    failed_with(ch04.check_app_cmake(lambda: text.replace(old, new)), *words)


def test_app_cmake_check_wants_find_package_before_its_use_and_reports_the_stub():
    text = _app_cmake_text()
    moved = text.replace("find_package(Torch REQUIRED)\n", "") + "find_package(Torch REQUIRED)\n"
    failed_with(ch04.check_app_cmake(lambda: moved), "must come before")

    def stub():
        raise NotImplementedError("not attempted yet")

    assert ch04.check_app_cmake(stub).status == "not attempted yet"
    failed_with(ch04.check_app_cmake(lambda: ["set(CMAKE_CXX_STANDARD 20)"]), "one string")


def _gxx(mistake, with_library_path=False):
    def run():
        import torch.utils.cpp_extension as cpp_extension

        solution = run_solution_cell("04_building_and_packaging", "ex4_1")["gxx_command"]
        environment = {"LD_LIBRARY_PATH": cpp_extension.library_paths()[0]} if with_library_path else {}
        with build._environment(**environment):
            return ch04.check_gxx_command(lambda source, output: mistake(solution(source, output), source, output))

    return run


def _rpath_left_out(command, source, output):
    return [w for w in command if not w.startswith("-Wl,-rpath")]


def _notebook_paths(command, source, output):
    """The paths of the notebook's own build (cell 9), written into the command instead of its arguments."""
    from workbook import BUILD_DIR

    shown = {source: str(ch04.program_source()), output: str(BUILD_DIR / "ch04" / "device_name")}
    return [shown.get(w, w) for w in command]


def _library_first(command, source, output):
    return [w for w in command if w != "-lc10"][:1] + ["-lc10"] + [w for w in command if w != "-lc10"][1:]


def _app_cmake_text():
    return run_solution_cell("04_building_and_packaging", "ex4_3")["app_cmake"]()


def _cmake(old, new, append=""):
    def run():
        text = _app_cmake_text()
        assert old in text
        return ch04.check_app_cmake(lambda: text.replace(old, new) + append)

    return run


def _lltm(**changes):
    def run():
        import torch.utils.cpp_extension as cpp_extension

        arguments = {
            "name": "wb_lltm._C",
            "sources": ["lltm.cpp", "lltm_python.cpp", "cpu/lltm_cpu.cpp"],
            "extra_compile_args": {"cxx": lltm.EXTRA_CFLAGS},
            "extra_link_args": ["-fopenmp"],
        }
        arguments.update(changes)
        return ch04.check_lltm_extension(lambda: cpp_extension.CppExtension(**arguments))

    return run


WRONG_ANSWERS = [
    # 4.1 a plain g++ build
    WrongAnswer(
        "4.1",
        "concept skipped",
        "no run path: works only in a shell that sets LD_LIBRARY_PATH",
        _gxx(_rpath_left_out, with_library_path=True),
        ("cannot find libc10.so when it runs", "rpath"),
    ),
    WrongAnswer(
        "4.1",
        "hard-coded",
        "the notebook's paths instead of the arguments",
        _gxx(_notebook_paths),
        ("`source`", "`output`"),
    ),
    WrongAnswer(
        "4.1",
        "wrong math",
        "the old C++ ABI",
        _gxx(
            lambda c, s, o: [
                f"-D_GLIBCXX_USE_CXX11_ABI={1 - ch04.torch_abi()}" if w.startswith("-D_GLIBCXX") else w for w in c
            ]
        ),
        ("as torch was built",),
    ),
    WrongAnswer(
        "4.1",
        "wrong math",
        "C++17",
        _gxx(lambda c, s, o: ["-std=c++17" if w.startswith("-std") else w for w in c]),
        ("C++20", "-std=c++17"),
    ),
    WrongAnswer(
        "4.1", "wrong math", "-lc10 before the source", _gxx(_library_first), ("-lc10", "after the source file")
    ),
    # 4.2 the LLTM as a setuptools extension
    WrongAnswer(
        "4.2",
        "wrong math",
        "no -fopenmp: at::parallel_for on one thread",
        _lltm(extra_compile_args={"cxx": lltm.cpu_flags()}),
        ("-fopenmp", "one thread"),
    ),
    WrongAnswer(
        "4.2",
        "wrong math",
        "-fopenmp compiled but not linked",
        _lltm(extra_link_args=[]),
        ("link arguments lack -fopenmp",),
    ),
    WrongAnswer(
        "4.2",
        "hard-coded",
        "this machine's absolute source paths",
        _lltm(sources=[str(generate.REPO_ROOT / p) for p in lltm.CPP_SOURCES]),
        ("relative to setup.py",),
    ),
    WrongAnswer(
        "4.2",
        "wrong math",
        "TORCH_EXTENSION_NAME set to the package's name",
        _lltm(extra_compile_args={"cxx": [*lltm.EXTRA_CFLAGS, "-DTORCH_EXTENSION_NAME=wb_lltm"]}),
        ("TORCH_EXTENSION_NAME", "'_C'"),
    ),
    # 4.3 CMake for the program
    WrongAnswer(
        "4.3",
        "wrong math",
        "C++20 asked for after the target exists",
        _cmake("set(CMAKE_CXX_STANDARD 20)\n", "", append="set(CMAKE_CXX_STANDARD 20)\n"),
        ("before add_executable(scatter_app",),
    ),
    WrongAnswer(
        "4.3",
        "wrong math",
        "wb_scatter linked with --as-needed in force",
        _cmake("-Wl,--no-as-needed wb_scatter -Wl,--as-needed", "wb_scatter"),
        ("--as-needed is in force", "--no-as-needed"),
    ),
    WrongAnswer(
        "4.3",
        "wrong math",
        "--no-as-needed after wb_scatter",
        _cmake("-Wl,--no-as-needed wb_scatter -Wl,--as-needed", "wb_scatter -Wl,--no-as-needed"),
        ("--as-needed is in force",),
    ),
    WrongAnswer(
        "4.3",
        "concept skipped",
        "the library built from the two files it had before the split, not csrc/scatter's CMakeLists.txt",
        _cmake(
            "add_subdirectory(../scatter wb_scatter)  # defines the library target wb_scatter\n",
            "",
            append="add_library(wb_scatter SHARED ../scatter/scatter.cpp ../scatter/cpu/scatter_cpu.cpp)\n"
            "target_link_libraries(wb_scatter PRIVATE ${TORCH_LIBRARIES})\n",
        ),
        ("not built from all of csrc/scatter's sources", "checks.cpp", "add_subdirectory(../scatter"),
    ),
    WrongAnswer(
        "4.3",
        "concept skipped",
        "the library built from the op-level unity file alone, without the four loop files",
        _cmake(
            "add_subdirectory(../scatter wb_scatter)  # defines the library target wb_scatter\n",
            "",
            append="add_library(wb_scatter SHARED ../scatter/scatter_unity.cpp)\n" + WITH_OPENMP,
        ),
        ("not built from all of csrc/scatter's sources", "cpu/scatter_cpu_sum.cpp"),
    ),
    WrongAnswer(
        "4.3",
        "concept skipped",
        "the library from a glob of csrc/scatter's .cpp files: the unity file and the six files it includes",
        _cmake(
            "add_subdirectory(../scatter wb_scatter)  # defines the library target wb_scatter\n",
            "",
            append="file(GLOB WB_SOURCES ../scatter/*.cpp ../scatter/cpu/*.cpp)\n"
            "add_library(wb_scatter SHARED ${WB_SOURCES})\n" + WITH_OPENMP,
        ),
        ("compiles autograd.cpp, autograd_min_max.cpp", "more than once", "defined twice"),
    ),
    WrongAnswer(
        "4.3",
        "concept skipped",
        "the library from the unity file, the loop files and checks.cpp again",
        _cmake(
            "add_subdirectory(../scatter wb_scatter)  # defines the library target wb_scatter\n",
            "",
            append="add_library(wb_scatter SHARED ../scatter/scatter_unity.cpp ../scatter/checks.cpp "
            + " ".join(f"../scatter/cpu/scatter_cpu_{r}.cpp" for r in ("sum", "mean", "min", "max"))
            + ")\n"
            + WITH_OPENMP,
        ),
        ("compiles checks.cpp more than once",),
    ),
    WrongAnswer(
        "4.3",
        "wrong math",
        "the library's ten files one by one, linked without OpenMP",
        _cmake(
            "add_subdirectory(../scatter wb_scatter)  # defines the library target wb_scatter\n",
            "",
            append=f"add_library(wb_scatter SHARED {' '.join('../scatter/' + f for f in TEN_FILES)})\n"
            "target_link_libraries(wb_scatter PRIVATE ${TORCH_LIBRARIES})\n",
        ),
        ("without -fopenmp", "one thread", "OpenMP::OpenMP_CXX"),
    ),
    WrongAnswer(
        "4.3",
        "concept skipped",
        "no find_package: libtorch only through the subproject",
        _cmake("find_package(Torch REQUIRED)", ""),
        ("find_package(Torch REQUIRED)",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)
