"""Everything chapters 05 and 11 need checked on a GPU machine, in one go:

    .venv/bin/python -m workbook.diagnostics.gpu_report            # all steps, a report on stdout
    .venv/bin/python -m workbook.diagnostics.gpu_report --quick    # smaller benchmarks

1. the machine: torch, CUDA, GPU, nvcc;
2. the compile-only check of every .cu under csrc/ (what CI runs without a GPU);
3. a build of wb_lltm, wb_scatter and wb_scatter_stable *with* their CUDA kernels (stops here if CUDA cannot be built);
4. the GPU tests (tests/test_lltm_cuda.py, tests/test_scatter_cuda.py, tests/test_scatter_stable_cuda.py), the
   compile tests and the emulated-kernel tests; then the scatter and LLTM ops under
   torch.compile(mode="reduce-overhead") against eager (chapter 08);
5. chapter 05, solutions and learner notebook, through nbval (stored outputs come from a CPU
   machine; cells whose output depends on the machine are marked to be ignored);
6. timings: LLTM forward+backward and the scatter ops on the CPU and on the GPU, and scatter_sum's
   throughput in GB/s next to a device-to-device copy of the same bytes;
7. chapter 11: the Triton kernels compiled for the GPU, torch.compile(fullgraph=True) and torch.export of
   the triton_op, chapter 11's tests and notebooks, and the Triton kernels timed against chapter 05's CUDA ones.

Exit status 0 when every step passed, 1 when one failed, 2 when there is no CUDA GPU here.
The timing helpers are also what the chapter's benchmark cells call, on either kind of machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch

from workbook import REPO_ROOT, build
from workbook.diagnostics import cuda_check

# --- timing helpers (used by chapter 05 too) ---------------------------------------------------


def _median_seconds(stmt, setup_globals, min_run_time=0.3) -> float:
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt=stmt, globals=setup_globals)
    return timer.blocked_autorange(min_run_time=min_run_time).median  # synchronises CUDA itself


def time_lltm(
    device, *, batch_size=64, input_features=256, state_size=512, dtype=torch.float32, min_run_time=0.3
) -> dict:
    """Median seconds of one LLTM step (forward + backward) through the C++/CUDA ops on `device`."""
    from workbook.ops import lltm

    lltm.load_extension()
    args = [
        t.to(device).requires_grad_() for t in lltm.make_inputs(batch_size, input_features, state_size, dtype=dtype)
    ]

    def step():
        new_h, new_cell = lltm.lltm_cpp(*args)
        (new_h.sum() + new_cell.sum()).backward()

    step()  # warm-up: first-call costs (cuBLAS handles, allocator) stay out of the timing
    return {
        "device": str(device),
        "shape": f"batch {batch_size}, input {input_features}, state {state_size}",
        "seconds": _median_seconds("step()", {"step": step}, min_run_time),
    }


def time_scatter(
    device, *, elements=1 << 20, groups=1 << 12, features=16, dtype=torch.float32, min_run_time=0.3
) -> list[dict]:
    """Median seconds of each scatter op on a (elements, features) src reduced along dim 0."""
    from workbook.ops import scatter

    generator = torch.Generator().manual_seed(0)
    src = torch.randn(elements, features, generator=generator).to(dtype=dtype, device=device)
    index = torch.randint(0, groups, (elements,), generator=generator).to(device)
    rows = []
    for name in ("sum", "mean", "min", "max"):
        function = getattr(scatter, f"scatter_{name}")
        function(src, index, 0, None, groups)  # warm-up (and the build on first use)
        seconds = _median_seconds(
            "f(src, index, 0, None, groups)",
            {"f": function, "src": src, "index": index, "groups": groups},
            min_run_time,
        )
        rows.append({"op": f"scatter_{name}", "device": str(device), "seconds": seconds})
    return rows


def scatter_bandwidth(device="cuda", *, elements=1 << 24, groups=1 << 16, min_run_time=0.5) -> dict:
    """scatter_sum's effective GB/s (bytes of src + index read, out written) next to a copy's.

    The copy moves the same bytes (src and index, read once and written once), so its GB/s is close
    to what the memory can do; a scatter with atomics reaches some fraction of it.
    """
    from workbook.ops import scatter

    generator = torch.Generator().manual_seed(0)
    src = torch.randn(elements, generator=generator).to(device)
    index = torch.randint(0, groups, (elements,), generator=generator).to(device)
    scatter.scatter_sum(src, index, 0, None, groups)
    scatter_seconds = _median_seconds(
        "f(src, index, 0, None, groups)",
        {"f": scatter.scatter_sum, "src": src, "index": index, "groups": groups},
        min_run_time,
    )
    moved = src.nbytes + index.nbytes + groups * src.element_size()
    src_copy, index_copy = torch.empty_like(src), torch.empty_like(index)
    copy_seconds = _median_seconds(
        "a.copy_(src); b.copy_(index)", {"a": src_copy, "b": index_copy, "src": src, "index": index}, min_run_time
    )
    copied = 2 * (src.nbytes + index.nbytes)  # read and written
    return {
        "elements": elements,
        "groups": groups,
        "scatter_sum_GBps": moved / scatter_seconds / 1e9,
        "copy_GBps": copied / copy_seconds / 1e9,
        "scatter_sum_seconds": scatter_seconds,
        "copy_seconds": copy_seconds,
    }


def reduce_overhead_mismatches(device="cuda", *, calls=3) -> list[str]:
    """The scatter ops and the LLTM op under torch.compile(mode="reduce-overhead"), against eager mode.

    On a GPU, reduce-overhead records the compiled code's kernel launches into a CUDA graph on a
    stream of its own and replays the graph on later calls. Only work issued on the current stream
    (the capturing one) is recorded: a kernel launched on another stream is missing from the replay,
    or fails the capture. The step is called `calls` times with new input values each time (so
    replays, not just the recording, are compared); returns what differed (empty when all matched).
    """
    from workbook.ops import lltm, scatter

    scatter.load()
    lltm.load_extension()
    ops = torch.ops.wb_scatter

    def step(src, index, cell_inputs):
        total = ops.scatter_sum(src, index, 0, 64)
        largest, argmax = ops.scatter_max(src, index, 0, 64)
        new_h, new_cell = lltm.lltm_op(*cell_inputs)
        return total, largest, argmax, new_h, new_cell

    torch._dynamo.reset()
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    generator = torch.Generator().manual_seed(5)
    mismatches = []
    for call in range(calls):
        src = torch.randn(4096, 16, generator=generator).to(device)
        index = torch.randint(0, 64, (4096,), generator=generator).to(device)
        cell_inputs = [t.to(device) for t in lltm.make_inputs(32, 16, 32, seed=call)]
        expected = step(src, index, cell_inputs)
        got = [t.clone() for t in compiled(src, index, cell_inputs)]  # a replay's outputs are overwritten by the next
        for name, a, b in zip(["scatter_sum", "scatter_max", "argmax", "new_h", "new_cell"], got, expected):
            if not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
                mismatches.append(f"call {call}: {name} differs from eager by up to {(a - b).abs().max().item():.3g}")
    return mismatches


def triton_compile_and_export() -> list[str]:
    """Chapter 11's triton_op on the GPU: torch.compile(fullgraph=True) and torch.export trace into its
    kernels and agree with eager. Prints what it finds; returns the problems (empty when all is well)."""
    from workbook.ops import lltm
    from workbook.ops import triton_kernels as tk

    if tk.INTERPRETED:
        return ["the Triton kernels are interpreted (TRITON_INTERPRET is set): unset it to compile them"]
    args = [t.requires_grad_() for t in lltm.make_inputs(8, 32, 64, device="cuda", seed=0)]

    def step(*cell_args):
        new_h, new_cell = tk.lltm_cell(*cell_args, ops=torch.ops.wb_triton)
        return (new_h.relu() + new_cell).sum()

    problems = []
    torch._dynamo.reset()
    expected = torch.autograd.grad(step(*args), args)
    got = torch.autograd.grad(torch.compile(step, fullgraph=True)(*args), args)
    same = all(torch.allclose(g, e, atol=1e-5) for g, e in zip(got, expected))
    print(f"torch.compile(fullgraph=True) of the triton_op: gradients equal eager's: {same}")
    if not same:
        problems.append("compiled triton_op gradients differ from eager")
    inputs = tuple(t.detach() for t in args)
    exported = torch.export.export(tk.LLTMCell(torch.ops.wb_triton), inputs)
    kernels = [node for node in exported.graph.nodes if "triton_kernel_wrapper" in str(node.target)]
    same = all(
        torch.allclose(g, e, atol=1e-5)
        for g, e in zip(exported.module()(*inputs), tk.LLTMCell(torch.ops.wb_triton)(*inputs))
    )
    print(
        f"torch.export of the triton_op: {len(kernels)} Triton kernel call(s) in the graph; output equals eager: {same}"
    )
    if not kernels or not same:
        problems.append("torch.export did not trace into the Triton kernels, or its program disagrees with eager")
    return problems


def time_triton_against_cuda(*, elements=1 << 20, groups=1 << 12, features=16, min_run_time=0.3) -> list[dict]:
    """Median seconds on the GPU of chapter 11's Triton kernels and chapter 05's CUDA kernels, side by side:
    one LLTM step (forward + backward) and scatter_sum (Triton with atomics, Triton on sorted rows)."""
    from workbook.ops import lltm, scatter
    from workbook.ops import triton_kernels as tk

    lltm.load_extension()
    args = [t.to("cuda").requires_grad_() for t in lltm.make_inputs(64, 256, 512)]

    def lltm_step(cell):
        def step():
            new_h, new_cell = cell(*args)
            (new_h.sum() + new_cell.sum()).backward()

        step()  # warm-up: compiles the Triton kernels, creates cuBLAS handles
        return _median_seconds("step()", {"step": step}, min_run_time)

    rows = [
        {
            "what": "LLTM forward+backward (batch 64, input 256, state 512)",
            "kernels": "CUDA (chapter 05)",
            "seconds": lltm_step(lltm.lltm_cpp),
        },
        {
            "what": "LLTM forward+backward (batch 64, input 256, state 512)",
            "kernels": "Triton (chapter 11)",
            "seconds": lltm_step(lambda *a: tk.lltm_cell(*a, ops=torch.ops.wb_triton)),
        },
    ]
    generator = torch.Generator().manual_seed(0)
    src = torch.randn(elements, features, generator=generator).cuda()
    index = torch.randint(0, groups, (elements,), generator=generator).cuda()
    sorted_src, offsets = tk.sort_by_group(src, index, groups)
    what = f"scatter_sum ({elements} x {features} float32 into {groups} groups)"
    for kernels, function, call_args in [
        ("CUDA (chapter 05)", lambda s, i: scatter.scatter_sum(s, i, 0, None, groups), (src, index)),
        ("Triton, atomics", lambda s, i: tk.scatter_sum(s, i, groups), (src, index)),
        ("Triton, sorted rows (sort not timed)", tk.segment_sum, (sorted_src, offsets)),
    ]:
        function(*call_args)
        seconds = _median_seconds("f(*args)", {"f": function, "args": call_args}, min_run_time)
        rows.append({"what": what, "kernels": kernels, "seconds": seconds})
    return rows


def format_seconds(seconds: float) -> str:
    if seconds >= 1e-1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-4:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


# --- the report ---------------------------------------------------------------------------------


def _step(title):
    print(f"\n== {title}", flush=True)


def _run(command, timeout=None) -> bool:
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO_ROOT, timeout=timeout)
    print(f"-> exit {completed.returncode} after {time.perf_counter() - started:.0f} s", flush=True)
    return completed.returncode == 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller benchmark sizes")
    parser.add_argument("--skip-notebooks", action="store_true", help="do not run chapters 05 and 11 through nbval")
    args = parser.parse_args(argv)
    python = sys.executable
    failures = []

    _step("1. machine")
    buildable, why = build.cuda_build_status()
    print(
        f"torch {torch.__version__}, CUDA build: {torch.version.cuda}, GPU: "
        f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}, "
        f"nvcc: {cuda_check.nvcc_version() or 'not found'}, CUDA extensions buildable: {buildable} ({why})"
    )

    _step("2. compile-only check of every .cu")
    for result in cuda_check.check_all():
        print(result)
        if result.status == cuda_check.FAILED:
            failures.append(f"compile check: {result.source}")

    if not torch.cuda.is_available():
        print("\nNo CUDA GPU here: steps 3-6 need one.")
        return 2
    if not buildable:
        print(f"\nCUDA kernels cannot be built here ({why}); steps 3-6 need a CUDA build of torch and nvcc.")
        return 1

    _step("3. build wb_lltm, wb_scatter and wb_scatter_stable with their CUDA kernels")
    from workbook.ops import lltm, scatter, scatter_stable

    started = time.perf_counter()
    lltm.load_extension()
    scatter.load()
    scatter_stable.load()
    print(f"built/loaded in {time.perf_counter() - started:.0f} s")
    for op in (
        "wb_lltm::lltm_forward",
        "wb_lltm::lltm_backward",
        "wb_scatter::scatter_sum",
        "wb_scatter::scatter_max.accumulate",
        "wb_scatter_stable::scatter_sum",
        "wb_scatter_stable::scatter_max.accumulate",
    ):
        has_cuda = torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA")
        print(f"{op}: CUDA kernel registered: {has_cuda}")
        if not has_cuda:
            failures.append(f"no CUDA kernel for {op}")

    _step("4. GPU tests, compile tests, emulated-kernel tests")
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    gpu_tests = [
        "test_lltm_cuda.py",
        "test_scatter_cuda.py",
        "test_scatter_stable_cuda.py",
        "test_cuda_compile.py",
        "test_cuda_emulated.py",
    ]
    if not _run(pytest + [f"tests/{name}" for name in gpu_tests]):
        failures.append("tests")

    _step("4b. the scatter and LLTM ops under torch.compile(mode='reduce-overhead') (CUDA graphs) against eager")
    mismatches = reduce_overhead_mismatches("cuda")
    print("\n".join(mismatches) or "all outputs match eager over 3 calls")
    if mismatches:
        failures.append("reduce-overhead")

    if not args.skip_notebooks:
        _step("5. chapter 05 through nbval (solutions and learner notebook)")
        if not _run(pytest + ["solutions/05_cuda_extensions.ipynb", "notebooks/05_cuda_extensions.ipynb"]):
            failures.append("chapter 05 notebooks")

    _step("6. timings (medians, torch.utils.benchmark)")
    scale = 4 if args.quick else 1
    for device in ("cpu", "cuda"):
        row = time_lltm(device)
        print(f"LLTM forward+backward, {row['shape']}, {device}: {format_seconds(row['seconds'])}")
    for device in ("cpu", "cuda"):
        for row in time_scatter(device, elements=(1 << 20) // scale):
            print(
                f"{row['op']}, {(1 << 20) // scale} x 16 float32 into 4096 groups, {device}: "
                f"{format_seconds(row['seconds'])}"
            )
    bandwidth = scatter_bandwidth("cuda", elements=(1 << 24) // scale)
    print(
        f"scatter_sum of {bandwidth['elements']} float32 into {bandwidth['groups']} groups: "
        f"{bandwidth['scatter_sum_GBps']:.0f} GB/s ({format_seconds(bandwidth['scatter_sum_seconds'])}); "
        f"device-to-device copy of src and index: {bandwidth['copy_GBps']:.0f} GB/s"
    )

    _step("7. chapter 11: Triton kernels compiled for the GPU, traced, tested and timed")
    failures += triton_compile_and_export()
    if not _run(pytest + ["tests/test_triton_kernels.py", "tests/test_ch11_exercises.py"]):
        failures.append("chapter 11 tests")
    if not args.skip_notebooks and not _run(
        pytest + ["solutions/11_triton_kernels.ipynb", "notebooks/11_triton_kernels.ipynb"]
    ):
        failures.append("chapter 11 notebooks")
    for row in time_triton_against_cuda(elements=(1 << 20) // scale):
        print(f"{row['what']}, {row['kernels']}: {format_seconds(row['seconds'])}")

    print("\n== result:", "all steps passed" if not failures else "FAILED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
