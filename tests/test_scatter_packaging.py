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

from workbook.ops import scatter as S


@pytest.fixture(scope="module")
def site():
    return S.install_package()


# One fresh Python for what the installed package must do (each such process imports torch, seconds of CPU):
# its results, its error messages, its gradients and its fake kernels, printed as one JSON object.
USE_THE_PACKAGE = """
import json, torch, wb_scatter
src = torch.tensor([[1., 5., 2.], [4., 0., 3.]]); index = torch.tensor([0, 0, 1])
values, arg = wb_scatter.scatter_max(src, index, dim=1)
found = {'file': wb_scatter.__file__, 'sum': wb_scatter.scatter_sum(src, index).tolist(),
         'values': values.tolist(), 'arg': arg.tolist(),
         'mean': wb_scatter.scatter(src, index, reduce='mean').tolist()}
try:
    wb_scatter.scatter_sum(torch.ones(3), torch.tensor([0., 1., 1.]))
except RuntimeError as e:
    found['error'] = str(e).splitlines()[0]
x = torch.tensor([1., 2., 3.], requires_grad=True)
wb_scatter.scatter_mean(x, torch.tensor([0, 0, 1])).sum().backward()
found['grad'] = x.grad.tolist()
src = torch.randn(6, 3, requires_grad=True); index = torch.tensor([0, 2, 2, 0, 3, 0])
found['opcheck'] = [sorted(set(torch.library.opcheck(overload, args).values())) for overload, args in [
    (torch.ops.wb_scatter.scatter_sum.default, (src, index, 0, None)),
    (torch.ops.wb_scatter.scatter_max.accumulate, (src, index, 0, torch.zeros(4, 3)))]]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def used(site):
    return json.loads(S.run_python(USE_THE_PACKAGE, path=site))


def test_package_installs_and_imports_after_torch(site, used):
    assert (site / "wb_scatter" / "__init__.py").exists()
    assert list((site / "wb_scatter").glob("_C*.so"))
    assert used["file"].startswith(str(site))
    src = torch.tensor([[1.0, 5.0, 2.0], [4.0, 0.0, 3.0]])
    index = torch.tensor([0, 0, 1])
    assert used["sum"] == S.reference_sum(src, index).tolist()
    assert used["mean"] == S.reference_mean(src, index).tolist()
    values, arg = S.reference_max(src, index, dim=1)
    assert used["values"] == values.tolist() and used["arg"] == arg.tolist()


def test_package_raises_named_errors_and_computes_gradients(used):
    assert used["error"] == "index must be an integer tensor (int64), got dtype Float"
    assert used["grad"] == [0.5, 0.5, 1.0]


def test_package_registers_fake_kernels_for_torch_compile(used):
    assert used["opcheck"] == [["SUCCESS"], ["SUCCESS"]]


def test_an_unchanged_install_is_not_run_again_and_a_changed_source_is(tmp_path, monkeypatch):
    source = tmp_path / "scatter"
    for path in S.PACKAGE_SOURCE.rglob("*"):
        if path.is_file() and path.suffix in (".cpp", ".h", ".cu", ".py", ".toml"):
            (source / path.relative_to(S.PACKAGE_SOURCE)).parent.mkdir(parents=True, exist_ok=True)
            (source / path.relative_to(S.PACKAGE_SOURCE)).write_bytes(path.read_bytes())
    monkeypatch.setattr(S, "PACKAGE_SOURCE", source)
    pip_runs = []

    def pip(project, step, command, log_dir):  # stands in for pip: writes what an install leaves
        pip_runs.append(command)
        (target / "wb_scatter").mkdir(parents=True, exist_ok=True)
        (target / "wb_scatter" / "__init__.py").write_text("")
        (target / "wb_scatter" / "_C.so").write_bytes(b"")

    monkeypatch.setattr(S.build, "run_build_step", pip)
    target = tmp_path / "site"
    assert S.install_package(target) == target and len(pip_runs) == 1
    S.install_package(target)
    assert len(pip_runs) == 1, "pip ran again although nothing changed"
    (source / "cpu" / "scatter_cpu.cpp").write_text((source / "cpu" / "scatter_cpu.cpp").read_text() + "// edited\n")
    S.install_package(target)
    assert len(pip_runs) == 2, "an edited source was not installed again"
    (target / "wb_scatter" / "_C.so").unlink()
    S.install_package(target)
    assert len(pip_runs) == 3, "a site without its library was not installed again"


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
        "from workbook.ops import scatter\n"
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
        "from workbook.ops import scatter\n"
        "try:\n"
        "    scatter.load()\n"
        "except RuntimeError as e:\n"
        "    print('RuntimeError:', e)\n",
        path=site,
    )
    assert "already registered in this process" in printed
