"""Exercise checks of chapters 03 and 04: they pass on the solutions and explain what is wrong otherwise.

The solutions are the exercise cells of solutions/03_cpp_autograd.ipynb and
solutions/04_building_and_packaging.ipynb, run here as they are (the C++ ones build through
workbook.scatter.load_inline_ops, reusing the notebook's build). The wrong implementations are
small Python stand-ins: the checks take any callable.
"""
import nbformat
import pytest
import torch

from workbook import generate, scatter
from workbook.exercises import ch03, ch04


def run_solution_cell(chapter, grade_id):
    notebook = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    namespace = {}
    exec("import torch\nimport torch.utils.cpp_extension as cpp_extension\nfrom workbook import scatter\n", namespace)
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
    failed_with(ch03.check_scatter_mean_backward(no_count), "gradient with respect to src", "divided by its group's count")
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
    failed_with(ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n, start_from_zero=True)),
                "values", "all negative")
    failed_with(ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n, last_wins=True)),
                "argindex", "the first one on a tie")
    failed_with(ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n, check_range=False)),
                "index value 5", "was accepted")
    failed_with(ch03.check_scatter_max(lambda s, i, n: _python_max(s, i, n)[0]), "two tensors")


def test_max_check_wants_the_error_to_name_index():
    def vague(src, index, dim_size):
        if int(index.max()) >= dim_size:
            raise RuntimeError("out of bounds")
        return _python_max(src, index, dim_size)

    failed_with(ch03.check_scatter_max(vague), "does not name index")


# ---- 4.1 a plain g++ build ------------------------------------------------------------------------

def test_gxx_check_passes_on_the_solution():
    solution = run_solution_cell("04_building_and_packaging", "ex4_1")["gxx_command"]
    assert ch04.check_gxx_command(solution).passed


@pytest.mark.parametrize("mistake, words", [
    (lambda c: [w for w in c if not w.startswith("-Wl,-rpath")], ("cannot find libc10.so when it runs", "rpath")),
    (lambda c: [w for w in c if not w.startswith("-I")], ("cannot find torch's headers", "include_paths")),
    (lambda c: [w for w in c if w != "-lc10"], ("link it with -lc10",)),
    (lambda c: [w for w in c if not w.startswith("-D_GLIBCXX")], ("-D_GLIBCXX_USE_CXX11_ABI=",)),
    (lambda c: [f"-D_GLIBCXX_USE_CXX11_ABI={1 - ch04.torch_abi()}" if w.startswith("-D_GLIBCXX") else w for w in c],
     ("state the ABI explicitly", "as torch was built")),
    (lambda c: [w for w in c if not w.startswith("-std")], ("C++17 or newer",)),
    (lambda c: " ".join(c), ("list of strings",)),
])
def test_gxx_check_explains_what_is_missing(mistake, words):
    solution = run_solution_cell("04_building_and_packaging", "ex4_1")["gxx_command"]
    failed_with(ch04.check_gxx_command(lambda source, output: mistake(solution(source, output))), *words)
