"""Exercise checks of chapters 03 and 04: they pass on the solutions and explain what is wrong otherwise.

The solutions are the exercise cells of solutions/03_cpp_autograd.ipynb and
solutions/04_building_and_packaging.ipynb, run here as they are (the C++ ones build through
workbook.scatter.load_inline_ops, reusing the notebook's build). The wrong implementations are
small Python stand-ins: the checks take any callable.
"""

import nbformat
import pytest
import torch

from workbook import generate, lltm, scatter
from workbook.exercises import ch03, ch04


def run_solution_cell(chapter, grade_id):
    notebook = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    namespace = {}
    exec(
        "import torch\nimport torch.utils.cpp_extension as cpp_extension\nfrom workbook import lltm, scatter\n",
        namespace,
    )
    exec(cell.source, namespace)
    return namespace


def failed_with(outcome, *words):
    assert outcome.status == "failed", str(outcome)
    for word in words:
        assert word in outcome.explanation, str(outcome)


# ---- 3.1 scatter_mean's backward --------------------------------------------------------------


def test_mean_backward_check_passes_on_the_solution():
    scatter.load()
    solution = run_solution_cell("03_cpp_autograd", "ex3_1")["my_scatter_mean"]
    assert ch03.check_scatter_mean_backward(solution).passed


def _mean_with_backward(backward):
    class Mean(torch.autograd.Function):
        @staticmethod
        def forward(ctx, src, index, dim, dim_size):
            ops = scatter.load()
            out = ops.scatter_mean(src, index, dim, dim_size)
            count = ops.scatter_sum(torch.ones_like(src), index, dim, out.size(dim))
            ctx.save_for_backward(index, count)
            ctx.dim = dim
            return out

        @staticmethod
        def backward(ctx, grad):
            index, count = ctx.saved_tensors
            return backward(grad, index, count, ctx.dim), None, None, None

    return Mean.apply


def test_mean_backward_check_passes_on_a_python_version_and_fails_without_the_count():
    right = _mean_with_backward(lambda g, i, c, d: g.gather(d, i) / c.gather(d, i))
    assert ch03.check_scatter_mean_backward(right).passed
    no_count = _mean_with_backward(lambda g, i, c, d: g.gather(d, i))
    failed_with(
        ch03.check_scatter_mean_backward(no_count), "gradient with respect to src", "divided by its group's count"
    )
    nothing = _mean_with_backward(lambda g, i, c, d: None)
    failed_with(ch03.check_scatter_mean_backward(nothing), "no gradient reached src")


def test_mean_backward_check_reports_a_stub_as_not_attempted():
    stub = _mean_with_backward(lambda g, i, c, d: (_ for _ in ()).throw(RuntimeError("not attempted yet")))
    assert ch03.check_scatter_mean_backward(stub).status == "not attempted yet"


# ---- 3.2 scatter_max with its argindex ----------------------------------------------------------


def test_max_check_passes_on_the_solution_and_on_the_reference():
    solution = run_solution_cell("03_cpp_autograd", "ex3_2")["my_scatter_max"]
    assert ch03.check_scatter_max(solution).passed
    assert ch03.check_scatter_max(lambda s, i, n: scatter.reference_max(s, i, 0, dim_size=n)).passed


def _python_max(src, index, dim_size, start_from_zero=False, last_wins=False, check_range=True):
    n = src.size(0)
    values = torch.zeros(dim_size, dtype=src.dtype)
    arg = torch.full((dim_size,), n, dtype=torch.long)
    for j in range(n):
        g = int(index[j])
        if check_range and not 0 <= g < dim_size:
            raise RuntimeError(f"index value {g} out of range")
        if not check_range and not 0 <= g < dim_size:
            continue
        empty = arg[g] == n and not start_from_zero
        better = src[j] >= values[g] if last_wins else src[j] > values[g]
        if empty or better:
            values[g], arg[g] = src[j], j
    return values, arg


def test_max_check_explains_each_classic_mistake():
    assert ch03.check_scatter_max(_python_max).passed
    failed_with(
        ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n, start_from_zero=True)), "values", "all negative"
    )
    failed_with(
        ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n, last_wins=True)),
        "argindex",
        "the first one on a tie",
    )
    failed_with(
        ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n, check_range=False)), "index value 5", "was accepted"
    )
    failed_with(ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n)[0]), "two tensors")


def test_max_check_wants_the_error_to_name_index():
    def vague(src, index, dim_size):
        if int(index.max()) >= dim_size:
            raise RuntimeError("out of bounds")
        return _python_max(src, index, dim_size)

    failed_with(ch03.check_scatter_max(vague), "does not name index")


# ---- 3.3 scatter_max's gradient, Python style ------------------------------------------------------


def _max_function(route):
    """A Python autograd.Function around the library's scatter_max whose backward is `route`."""

    class ScatterMaxPy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, src, index, dim, dim_size):
            values, argindex = scatter.load().scatter_max(src, index, dim, dim_size)
            ctx.save_for_backward(argindex, index)
            ctx.dim, ctx.n = dim, src.size(dim)
            return values, argindex

        @staticmethod
        def backward(ctx, grad_values, grad_argindex):
            argindex, index = ctx.saved_tensors
            return route(grad_values, argindex, index, ctx.dim, ctx.n), None, None, None

    return ScatterMaxPy


def _spare_slot(grad, argindex, index, dim, n):
    shape = list(grad.shape)
    shape[dim] = n + 1
    return grad.new_zeros(shape).scatter_(dim, argindex, grad).narrow(dim, 0, n)


def _no_spare_slot(grad, argindex, index, dim, n):
    shape = list(grad.shape)
    shape[dim] = n
    return grad.new_zeros(shape).scatter_(dim, argindex, grad)


def _clamped(grad, argindex, index, dim, n):
    return _no_spare_slot(grad, argindex.clamp(max=n - 1), index, dim, n)


def test_max_function_check_passes_on_the_solution_and_on_a_python_version():
    namespace = run_solution_cell("03_cpp_autograd", "ex3_3")
    namespace["ops"] = scatter.load()  # the notebook's global, read when forward runs
    assert ch03.check_scatter_max_function(namespace["ScatterMaxPy"]).passed
    assert ch03.check_scatter_max_function(_max_function(_spare_slot)).passed


@pytest.mark.parametrize(
    "route, words",
    [
        (lambda g, a, i, d, n: g.gather(d, i), ("gradient with respect to src", "belongs to its winner alone")),
        (_clamped, ("gradient with respect to src", "nothing for an empty group")),
        (_no_spare_slot, ("your backward raised", "spare slot")),
        (lambda g, a, i, d, n: None, ("no gradient reached src",)),
    ],
)
def test_max_function_check_explains_each_mistake(route, words):
    failed_with(ch03.check_scatter_max_function(_max_function(route)), *words)


def test_max_function_check_wants_two_outputs_and_reports_stubs():
    class ValuesOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx, src, index, dim, dim_size):
            return scatter.load().scatter_max(src, index, dim, dim_size)[0]

        @staticmethod
        def backward(ctx, grad):
            return None, None, None, None

    failed_with(ch03.check_scatter_max_function(ValuesOnly), "should return (values, argindex)")

    def stub(grad, argindex, index, dim, n):
        raise NotImplementedError("not attempted yet")

    assert ch03.check_scatter_max_function(_max_function(stub)).status == "not attempted yet"


# ---- 4.1 a plain g++ build ------------------------------------------------------------------------


def test_gxx_check_passes_on_the_solution():
    solution = run_solution_cell("04_building_and_packaging", "ex4_1")["gxx_command"]
    assert ch04.check_gxx_command(solution).passed


@pytest.mark.parametrize(
    "mistake, words",
    [
        (lambda c: [w for w in c if not w.startswith("-Wl,-rpath")], ("cannot find libc10.so when it runs", "rpath")),
        (lambda c: [w for w in c if not w.startswith("-I")], ("cannot find torch's headers", "include_paths")),
        (lambda c: [w for w in c if w != "-lc10"], ("link it with -lc10",)),
        (lambda c: [w for w in c if not w.startswith("-D_GLIBCXX")], ("-D_GLIBCXX_USE_CXX11_ABI=",)),
        (
            lambda c: [
                f"-D_GLIBCXX_USE_CXX11_ABI={1 - ch04.torch_abi()}" if w.startswith("-D_GLIBCXX") else w for w in c
            ],
            ("state the ABI explicitly", "as torch was built"),
        ),
        (lambda c: [w for w in c if not w.startswith("-std")], ("C++20", "-std=c++20")),
        (lambda c: ["-std=c++17" if w.startswith("-std") else w for w in c], ("C++20", "-std=c++17")),
        (lambda c: " ".join(c), ("list of strings",)),
    ],
)
def test_gxx_check_explains_what_is_missing(mistake, words):
    solution = run_solution_cell("04_building_and_packaging", "ex4_1")["gxx_command"]
    failed_with(ch04.check_gxx_command(lambda source, output: mistake(solution(source, output))), *words)


# ---- 4.2 the LLTM as a setuptools extension ---------------------------------------------------------


def _lltm_extension(**changes):
    import torch.utils.cpp_extension as cpp_extension

    arguments = {
        "name": "wb_lltm._C",
        "sources": ["lltm.cpp", "lltm_python.cpp", "cpu/lltm_cpu.cpp"],
        "extra_compile_args": {"cxx": lltm.cpu_flags()},
    }
    make = changes.pop("make", cpp_extension.CppExtension)
    arguments.update(changes)
    return lambda: make(**arguments)


def test_lltm_extension_check_passes_on_the_solution_and_a_variant():
    solution = run_solution_cell("04_building_and_packaging", "ex4_2")
    assert ch04.check_lltm_extension(solution["lltm_extension"]).passed
    assert ch04.check_lltm_extension(_lltm_extension()).passed


def _plain_extension(**arguments):
    from setuptools import Extension

    return Extension(**arguments)


SIMD_FLAGS = [flag for flag in lltm.cpu_flags() if not flag.startswith("-O")]


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"make": _plain_extension}, ("torch's include folders", "CppExtension")),
        ({"name": "wb_lltm"}, ("'wb_lltm._C'",)),
        (
            {"sources": ["csrc/lltm/lltm.cpp", "csrc/lltm/lltm_python.cpp", "csrc/lltm/cpu/lltm_cpu.cpp"]},
            ("relative to setup.py",),
        ),
        ({"sources": ["lltm.cpp", "cpu/lltm_cpu.cpp"]}, ("lltm_python.cpp", "PyInit__C")),
        ({"sources": ["lltm_python.cpp", "cpu/lltm_cpu.cpp"]}, ("lltm.cpp", "TORCH_LIBRARY")),
        ({"sources": ["lltm.cpp", "lltm_python.cpp", "cpu/lltm.cpp"]}, ("no csrc/lltm/cpu/lltm.cpp",)),
        ({"sources": ["lltm.cpp", "lltm_python.cpp", "cpu/lltm_cpu.cpp", "cuda/lltm_cuda.cu"]}, ("remove",)),
        pytest.param(
            {"extra_compile_args": ["-O3"]},
            ("without lltm.cpu_flags()", "SIMD"),
            marks=pytest.mark.skipif(not SIMD_FLAGS, reason="this CPU gets no SIMD flags (no AVX2)"),
        ),
    ],
)
def test_lltm_extension_check_explains_what_is_wrong(changes, words):
    failed_with(ch04.check_lltm_extension(_lltm_extension(**changes)), *words)


def test_lltm_extension_check_wants_an_extension():
    failed_with(ch04.check_lltm_extension(lambda: "wb_lltm._C"), "should return a setuptools Extension")


def test_lltm_extension_check_reports_the_stub_as_not_attempted():
    def stub():
        raise NotImplementedError("not attempted yet")

    assert ch04.check_lltm_extension(stub).status == "not attempted yet"


# ---- 4.3 CMake for a program that calls the scatter ops ---------------------------------------------


def _app_cmake():
    return run_solution_cell("04_building_and_packaging", "ex4_3")["app_cmake"]


def test_app_cmake_check_passes_on_the_solution_and_on_variants():
    solution = _app_cmake()
    assert ch04.check_app_cmake(solution).passed
    features = (
        solution().replace("set(CMAKE_CXX_STANDARD 20)", "")
        + "target_compile_features(scatter_app PRIVATE cxx_std_20)\n"
    )
    features = features.replace("find_package(Torch REQUIRED)", "find_package(Torch REQUIRED CONFIG)  # libtorch")
    assert ch04.check_app_cmake(lambda: features).passed, str(ch04.check_app_cmake(lambda: features))


def test_app_cmake_check_wants_the_target_defined_before_it_is_configured():
    standard = "target_compile_features(scatter_app PRIVATE cxx_std_20)"
    early = _app_cmake()().replace("set(CMAKE_CXX_STANDARD 20)", standard)
    failed_with(ch04.check_app_cmake(lambda: early), "comes before add_executable(scatter_app")


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("find_package(Torch REQUIRED)", "", ("find_package(Torch REQUIRED)",)),
        ("find_package(Torch REQUIRED)", "# find_package(Torch REQUIRED)", ("find_package(Torch REQUIRED)",)),
        ("set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD 17)", ("C++20", "asks for C++17")),
        ("set(CMAKE_CXX_STANDARD 20)", "", ("C++20", "no standard")),
        (
            "add_executable(scatter_app app.cpp)",
            "add_executable(app app.cpp)",
            ("add_executable(scatter_app app.cpp)",),
        ),
        ("-Wl,--no-as-needed wb_scatter -Wl,--as-needed", "wb_scatter", ("--no-as-needed", "drops the library")),
        ("-Wl,--no-as-needed wb_scatter -Wl,--as-needed", "wb_scatter -Wl,--no-as-needed", ("--no-as-needed",)),
        ("${TORCH_LIBRARIES} ", "", ("${TORCH_LIBRARIES} is missing",)),
        (" -Wl,--no-as-needed wb_scatter -Wl,--as-needed", "", ("wb_scatter is missing",)),
    ],
)
def test_app_cmake_check_explains_each_mistake(old, new, words):
    text = _app_cmake()()
    assert old in text
    failed_with(ch04.check_app_cmake(lambda: text.replace(old, new)), *words)


def test_app_cmake_check_wants_find_package_before_its_use():
    text = _app_cmake()()
    moved = text.replace("find_package(Torch REQUIRED)\n", "") + "find_package(Torch REQUIRED)\n"
    failed_with(ch04.check_app_cmake(lambda: moved), "must come before")


def test_app_cmake_check_reports_the_stub_as_not_attempted_and_wants_text():
    def stub():
        raise NotImplementedError("not attempted yet")

    assert ch04.check_app_cmake(stub).status == "not attempted yet"
    failed_with(ch04.check_app_cmake(lambda: ["set(CMAKE_CXX_STANDARD 20)"]), "one string")
