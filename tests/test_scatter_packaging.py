"""Chapter 04's builds of csrc/scatter: a pip-installed package and a CMake library plus program.

Both build into the git-ignored build/ folder and are reused between runs (pip's setuptools build
keeps its objects in build/scatter_pkg/setuptools, ninja rebuilds only what changed, ccache covers
the rest). The package is installed with `pip install --target build/scatter_pkg/site`, a folder
of its own, so the test never changes the project's virtual environment; it is imported in a fresh
Python process, because a process can register the wb_scatter namespace only once and this one may
hold the JIT build already.
"""

import json
import subprocess

import pytest
import torch

from workbook import scatter as S


@pytest.fixture(scope="module")
def site():
    return S.install_package()


def test_package_installs_and_imports_after_torch(site):
    assert (site / "wb_scatter" / "__init__.py").exists()
    assert list((site / "wb_scatter").glob("_C*.so"))
    printed = S.run_python(
        "import json, torch, wb_scatter\n"
        "src = torch.tensor([[1., 5., 2.], [4., 0., 3.]]); index = torch.tensor([0, 0, 1])\n"
        "values, arg = wb_scatter.scatter_max(src, index, dim=1)\n"
        "print(json.dumps({'file': wb_scatter.__file__, 'sum': wb_scatter.scatter_sum(src, index).tolist(),\n"
        "                  'values': values.tolist(), 'arg': arg.tolist(),\n"
        "                  'mean': wb_scatter.scatter(src, index, reduce='mean').tolist()}))\n",
        path=site,
    )
    result = json.loads(printed)
    assert result["file"].startswith(str(site))
    src = torch.tensor([[1.0, 5.0, 2.0], [4.0, 0.0, 3.0]])
    index = torch.tensor([0, 0, 1])
    assert result["sum"] == S.reference_sum(src, index).tolist()
    assert result["mean"] == S.reference_mean(src, index).tolist()
    values, arg = S.reference_max(src, index, dim=1)
    assert result["values"] == values.tolist() and result["arg"] == arg.tolist()


def test_package_raises_named_errors_and_computes_gradients(site):
    printed = S.run_python(
        "import torch, wb_scatter\n"
        "try:\n"
        "    wb_scatter.scatter_sum(torch.ones(3), torch.tensor([0., 1., 1.]))\n"
        "except RuntimeError as e:\n"
        "    print(str(e).splitlines()[0])\n"
        "x = torch.tensor([1., 2., 3.], requires_grad=True)\n"
        "wb_scatter.scatter_mean(x, torch.tensor([0, 0, 1])).sum().backward()\n"
        "print(x.grad.tolist())\n",
        path=site,
    )
    assert printed.splitlines() == ["index must be an integer tensor (int64), got dtype Float", "[0.5, 0.5, 1.0]"]


def test_package_registers_fake_kernels_for_torch_compile(site):
    printed = S.run_python(
        "import torch, wb_scatter\n"
        "src = torch.randn(6, 3, requires_grad=True); index = torch.tensor([0, 2, 2, 0, 3, 0])\n"
        "for overload, args in [(torch.ops.wb_scatter.scatter_sum.default, (src, index, 0, None)),\n"
        "                       (torch.ops.wb_scatter.scatter_max.accumulate, (src, index, 0, torch.zeros(4, 3)))]:\n"
        "    print(sorted(set(torch.library.opcheck(overload, args).values())))\n",
        path=site,
    )
    assert printed.splitlines() == ["['SUCCESS']", "['SUCCESS']"]


def test_package_without_its_library_says_how_to_build_it(tmp_path):
    (tmp_path / "wb_scatter").mkdir()
    for module in (S.PACKAGE_SOURCE / "wb_scatter").glob("*.py"):  # the Python files, no compiled library
        (tmp_path / "wb_scatter" / module.name).write_text(module.read_text())
    with pytest.raises(RuntimeError, match="pip install --no-build-isolation"):
        S.run_python("import wb_scatter", path=tmp_path)


def test_cmake_builds_the_library_and_a_program_that_calls_the_ops():
    build_dir = S.cmake_build()
    assert (build_dir / "libwb_scatter.so").exists()
    result = subprocess.run([str(build_dir / "scatter_demo")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    # scatter_sum of [[1, 2, 3], [4, 5, 6]] with index [0, 1, 0] along dim 1: [[4, 2], [10, 5]]
    assert "scatter_sum(src, index, dim=1):\n  4   2\n 10   5\n" in text
    assert "scatter_sum.accumulate into ones(2, 2):\n  5   3\n 11   6\n" in text
    assert "argindex (3 = src.size(1) marks the empty group):\n 2  1  3\n 2  1  3\n" in text
    assert "with respect to src:\n 0  1  1\n 0  1  1\n" in text
    assert "a negative index is refused: index value -1" in text


def test_package_refuses_to_load_over_the_jit_build_instead_of_aborting(site):
    printed = S.run_python(
        "from workbook import scatter\n"
        "scatter.load()\n"
        "try:\n"
        "    import wb_scatter\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n",
        path=site,
    )
    assert "already registered in this process" in printed


def test_jit_build_refuses_to_load_over_the_package(site):
    printed = S.run_python(
        "import wb_scatter\n"
        "from workbook import scatter\n"
        "try:\n"
        "    scatter.load()\n"
        "except RuntimeError as e:\n"
        "    print('RuntimeError:', e)\n",
        path=site,
    )
    assert "already registered in this process" in printed
