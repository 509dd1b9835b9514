"""Chapter 08, the successor path: torch.library, torch.compile, torch.export and AOTInductor.

    from workbook.chapters import torch_library_compile_export
    torch_library_compile_export.show_dispatcher()                      # the dispatcher, drawn (a PNG for a notebook)
    torch_library_compile_export.kernels_of("wb_scatter::scatter_sum")   # which dispatch keys have a kernel
    layer = torch_library_compile_export.MessagePassing(8)               # a graph layer built on the scatter ops
    model = torch_library_compile_export.NeighbourSum()                  # a smaller one that checks its edge_index
    x, edge_index = torch_library_compile_export.make_graph(10, 30, 8)
    op = torch_library_compile_export.new_segment_sum(fake=...)          # a fresh custom op for the exercises
    package = torch_library_compile_export.package(exported, "layer")   # torch.export -> AOTInductor .pt2 under build/ch08
    loaded = torch_library_compile_export.load_package(package)         # ... loaded so that it checks its inputs
    run = torch_library_compile_export.run_aoti_app(package, inputs, libraries=[...])   # the C++ program of csrc/aoti_app

Importing this module points Inductor's on-disk caches at build/inductor_cache (unless
TORCHINDUCTOR_CACHE_DIR is already set), so the notebook, its second copy and the tests reuse each
other's compiled graphs instead of compiling them again.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from workbook import BUILD_DIR, CSRC_DIR, REPO_ROOT, build
from workbook.build import cmake_build, fresh_namespace, progress_line
from workbook.build.errors import strip_repo

ARTEFACTS = BUILD_DIR / "ch08"
build.use_inductor_cache()

# Dispatch keys worth asking about for a custom operator, in the order the dispatcher tries them.
DISPATCH_KEYS = ["Autograd", "CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "CUDA", "Meta"]


def kernels_of(qualname: str) -> list[str]:
    """The dispatch keys that have a kernel for operator `qualname` ("namespace::name"), plus
    "fake (Python)" when a fake kernel was registered with torch.library.register_fake."""
    import torch
    from torch._library import simple_registry

    found = [key for key in DISPATCH_KEYS if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)]
    if simple_registry.singleton.find(qualname).fake_impl.kernel is not None:
        found.append("fake (Python)")
    return found


# ---- the dispatcher, drawn ------------------------------------------------------------------------


def dispatcher_figure():
    """A figure of one call's path: Python call -> schema -> Autograd -> CPU / CUDA / fake kernel.

    A plain matplotlib Figure, not one registered with pyplot, so a notebook shows it once: as the
    image `show_dispatcher` returns.
    """
    from matplotlib.figure import Figure

    from workbook.chapters import drawing

    figure = Figure(figsize=(10, 5.6))
    axes = figure.add_subplot()
    axes.set_xlim(0, 10)
    axes.set_ylim(0, 6.2)
    axes.axis("off")

    def box(x, y, width, text, colour, height=0.62):
        drawing.draw_box(axes, x, y, width, height, text, colour, boxstyle="round,pad=0.04,rounding_size=0.12")

    def arrow(start, end, label=""):
        axes.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": "#333333"})
        if label:
            axes.text(
                (start[0] + end[0]) / 2 + 0.08,
                (start[1] + end[1]) / 2,
                label,
                fontsize=7.5,
                color="#444444",
                va="center",
            )

    box(5, 5.75, 7.4, "Python: torch.ops.wb_scatter.scatter_sum(src, index, 0, None)", "#e8eef7")
    box(
        5,
        4.7,
        7.4,
        "schema (TORCH_LIBRARY): wb_scatter::scatter_sum(Tensor src,\n"
        "Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor",
        "#f2f2f2",
        height=0.75,
    )
    box(
        5,
        3.6,
        7.4,
        "dispatcher: picks a kernel from the arguments' dispatch keys\n(device, Autograd, fake or meta, ...)",
        "#fff4d6",
        height=0.75,
    )
    box(
        5,
        2.5,
        6.2,
        "Autograd kernel (TORCH_LIBRARY_IMPL(..., Autograd, m))\n"
        "records the backward, then re-dispatches below Autograd",
        "#fde2e2",
        height=0.75,
    )
    kernels = [
        (1.6, "CPU kernel (C++)\nTORCH_LIBRARY_IMPL\n(..., CPU, m)", "#e3f4e1", 2.6),
        (4.4, "CUDA kernel (C++)\nTORCH_LIBRARY_IMPL\n(..., CUDA, m)", "#e3f4e1", 2.6),
        (
            7.85,
            "fake kernel (Python), register_fake:\nshapes, dtypes and strides only;\nit also serves the Meta key",
            "#ece3f4",
            3.9,
        ),
    ]
    for x, text, colour, width in kernels:
        box(x, 0.6, width, text, colour, height=1.0)
        arrow((5, 2.1), (x, 1.15))
    arrow((5, 5.43), (5, 5.09), "the Python binding matches the arguments to an overload")
    arrow((5, 4.31), (5, 3.99))
    arrow((5, 3.21), (5, 2.89), "every ordinary tensor has the Autograd key (it records only if one requires grad)")
    for x, text in [(3.0, "real tensors: by device"), (7.85, "torch.compile / torch.export: fake or meta tensors")]:
        axes.text(
            x,
            1.45,
            text,
            ha="center",
            fontsize=7.5,
            color="#444444",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )
    figure.tight_layout()
    return figure


def show_dispatcher():
    """The dispatcher figure as a PNG image for a notebook cell's result."""
    import io

    from IPython.display import Image

    buffer = io.BytesIO()
    dispatcher_figure().savefig(buffer, format="png", dpi=90)
    return Image(data=buffer.getvalue())


def stable_abi_figure():
    """Two ways from an extension into libtorch: ATen's C++ classes, or the stable ABI's C functions."""
    from workbook.chapters import drawing

    figure, axes = drawing.canvas(10, 4.8, (0, 10), (-0.2, 5.2))
    columns = [
        (
            2.6,
            "csrc/scatter: wb_scatter",
            [
                ("your kernels and autograd (C++)", "#e3f4e1"),
                ("ATen's C++ API: at::Tensor, TORCH_LIBRARY,\nautograd::Function, TensorIterator", "#e8eef7"),
                ("C++ symbols of libtorch (mangled names:\nclass layouts of this one torch build)", "#fde2e2"),
            ],
            "a build per torch version (and per Python\nversion for a Python extension module)",
        ),
        (
            7.4,
            "csrc/scatter_stable: wb_scatter_stable",
            [
                ("your kernels (C++); autograd and fake\nkernels in Python", "#e3f4e1"),
                ("header-only wrappers: torch::stable::Tensor,\nSTABLE_TORCH_LIBRARY, torch/headeronly", "#e8eef7"),
                ("C functions of the shim (aoti_torch_*,\ntorch_*): a C ABI torch keeps stable", "#fff4d6"),
            ],
            "one abi3 wheel: CPython >= 3.10, and the torch\nit was built for and later ones (the ABI's promise)",
        ),
    ]
    for x, title, layers, result in columns:
        axes.text(x, 4.95, title, ha="center", fontsize=9, weight="bold")
        for row, (text, colour) in enumerate(layers):
            drawing.draw_box(axes, x, 4.25 - 1.05 * row, 4.4, 0.75, text, colour, fontsize=7.5)
            if row:
                axes.annotate(
                    "",
                    xy=(x, 4.25 - 1.05 * row + 0.38),
                    xytext=(x, 4.25 - 1.05 * (row - 1) - 0.38),
                    arrowprops={"arrowstyle": "->", "color": "#333333"},
                )
        axes.annotate("", xy=(x, 1.21), xytext=(x, 1.77), arrowprops={"arrowstyle": "->", "color": "#333333"})
        drawing.draw_box(axes, x, 0.9, 4.4, 0.6, "libtorch_cpu.so, libc10.so", "#f2f2f2", fontsize=7.5)
        axes.text(x, 0.5, result, ha="center", va="top", fontsize=7.5, color="#444444")
    figure.tight_layout()
    return figure


def show_stable_abi():
    from workbook.chapters import drawing

    return drawing.as_image(stable_abi_figure())


def migration_figure():
    """Chapters 06-07's TorchScript pipeline above its successor, step for step."""
    from workbook.chapters import drawing

    figure, axes = drawing.canvas(10.8, 3.4, (0, 10.8), (0, 3.6))
    steps = ["the model\n(Python)", "capture", "save", "run in C++", "op library in\nthe C++ program"]
    rows = [
        (
            2.6,
            "TorchScript\n(chapters 06-07)",
            "#fde2e2",
            [
                "nn.Module",
                "torch.jit.script\nor torch.jit.trace",
                "torch.jit.save\n-> model.pt",
                "torch::jit::load\nmodule.forward(IValues)",
                "linked with\n-Wl,--no-as-needed",
            ],
        ),
        (
            0.9,
            "successors\n(this chapter)",
            "#e3f4e1",
            [
                "nn.Module",
                "torch.export.export\n(+ dynamic_shapes)",
                "aoti_compile_and_\npackage -> .pt2",
                "AOTIModelPackageLoader\n.run(vector<Tensor>)",
                "dlopen(RTLD_NOW |\nRTLD_GLOBAL) first",
            ],
        ),
    ]
    xs = [2.0, 4.0, 6.0, 8.05, 9.85]
    widths = [1.5, 1.8, 1.8, 2.1, 1.3]
    for x, step in zip(xs, steps):
        axes.text(x, 3.45, step, ha="center", va="top", fontsize=7.5, color="#444444")
    for y, label, colour, cells in rows:
        axes.text(0.55, y, label, ha="center", va="center", fontsize=8, weight="bold")
        for i, (x, width, text) in enumerate(zip(xs, widths, cells)):
            drawing.draw_box(axes, x, y, width, 0.8, text, colour, fontsize=6.8)
            if 0 < i < 4:
                axes.annotate(
                    "",
                    xy=(x - width / 2, y),
                    xytext=(xs[i - 1] + widths[i - 1] / 2, y),
                    arrowprops={"arrowstyle": "->", "color": "#333333"},
                )
    figure.tight_layout()
    return figure


def show_migration():
    from workbook.chapters import drawing

    return drawing.as_image(migration_figure())


# ---- a model built on the workbook's scatter ops ----------------------------------------------------


def make_graph(num_nodes: int, num_edges: int, features: int, *, seed: int = 0):
    """Random node features (num_nodes, features) and edges (2, num_edges) as (source, target) rows.

    The last node receives no edge, so that a layer sizing its output from the edges (instead of
    from the number of nodes) shows itself by a missing row.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, features, generator=generator)
    source = torch.randint(0, num_nodes, (num_edges,), generator=generator)
    target = torch.randint(0, max(num_nodes - 1, 1), (num_edges,), generator=generator)
    return x, torch.stack([source, target])


def _model_classes() -> dict:
    import torch
    from torch import nn

    from workbook.ops import scatter

    scatter.load()

    class MessagePassing(nn.Module):
        """One round of message passing: every node averages and maxes the messages of its in-edges.

        out[v] = relu(self_weight(x[v]) + mean_{u -> v} message(x[u]) + max_{u -> v} message(x[u]))

        The output has one row per node (dim_size = x.shape[0]); a node without in-edges gets zeros
        from both reductions.
        """

        def __init__(self, features: int, ops=None):
            super().__init__()
            self.message = nn.Linear(features, features)
            self.self_weight = nn.Linear(features, features, bias=False)
            self.ops = ops or torch.ops.wb_scatter  # where scatter_mean and scatter_max come from

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            source, target = edge_index[0], edge_index[1]
            messages = self.message(x).index_select(0, source)
            nodes = x.shape[0]
            mean = self.ops.scatter_mean(messages, target, 0, nodes)
            maximum, _ = self.ops.scatter_max(messages, target, 0, nodes)
            return torch.relu(self.self_weight(x) + mean + maximum)

    class NeighbourSum(nn.Module):
        """out[v] = the sum of x[u] over the edges u -> v: one row per node, zeros without in-edges.

        It checks the node numbers in edge_index itself. torch._assert_async is a check on a
        tensor's values that is recorded in the graph, so it is still there in an exported program,
        before anything reads x at those numbers.
        """

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            nodes = x.shape[0]
            torch._assert_async(
                ((edge_index >= 0) & (edge_index < nodes)).all(),
                "edge_index holds a node number outside [0, x.shape[0])",
            )
            source, target = edge_index[0], edge_index[1]
            return torch.ops.wb_scatter.scatter_sum(x.index_select(0, source), target, 0, nodes)

    return {"MessagePassing": MessagePassing, "NeighbourSum": NeighbourSum}


def __getattr__(name):
    # The model classes need torch and the scatter ops; build them on first use so that importing
    # this module stays cheap.
    if name in ("MessagePassing", "NeighbourSum"):
        globals().update(_model_classes())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_int_schema_library = None


def int_schema_ops():
    """torch.ops.wb_ch08_int: scatter_mean and scatter_max as they were declared before dim_size became a
    SymInt (`int? dim_size`), each running the wb_scatter op of the same name.

    Defined once per process (a namespace can be defined only once); the Library object is kept, since
    dropping it would remove the ops again.
    """
    import torch

    global _int_schema_library
    if _int_schema_library is None:
        from workbook.ops import scatter

        ops = scatter.load()
        library = torch.library.Library("wb_ch08_int", "DEF")
        for name in ("scatter_mean", "scatter_max"):
            overload = getattr(ops, name).default
            library.define(str(overload._schema).split("::", 1)[1].replace("SymInt? dim_size", "int? dim_size"))
            # CompositeImplicitAutograd: the op is its call of the wb_scatter op, traced through by the compiler.
            library.impl(name, overload, "CompositeImplicitAutograd")
        _int_schema_library = library
    return torch.ops.wb_ch08_int


# ---- out= ops, and what is not one ------------------------------------------------------------------

_mutating_ops = None


def mutating_ops():
    """Three Python ops around wb_scatter's scatter_sum, on the ways an op can write into a tensor it is given
    (defined once per process; the namespace is wb_ch08_out):

    scatter_sum_out   an out= op, tagged torch.Tag.out: it writes `out` and never reads it (out's old
                      values are dropped), and returns it. torch generates its fake kernel from the schema.
    scatter_sum_into  the accumulate overload (it adds into out, so it reads it) mislabelled with
                      torch.Tag.out: a promise compiled code relies on, and opcheck catches.
    scatter_sum_maybe one op for both calls, `Tensor(a!)? out=None -> Tensor(a!)`: the result is out when
                      given, else a new tensor (the "maybe-out" pattern).

    Returns torch.ops.wb_ch08_out.
    """
    import torch

    global _mutating_ops
    if _mutating_ops is None:
        from workbook.ops import scatter

        ops = scatter.load()

        # The schemas are spelled out: this module's annotations are strings (from __future__ import annotations).
        out_schema = "(Tensor src, Tensor index, int dim, *, Tensor(a!) out) -> Tensor(a!)"

        # An out= op: it writes out and never reads it.
        @torch.library.custom_op(
            "wb_ch08_out::scatter_sum_out", mutates_args={"out"}, tags=torch.Tag.out, schema=out_schema
        )
        def scatter_sum_out(src, index, dim, *, out):
            ops.scatter_sum.accumulate(src, index, dim, out.zero_())  # write-only: out's old values are dropped
            return out

        # The same promise, broken: this one reads out.
        @torch.library.custom_op(
            "wb_ch08_out::scatter_sum_into", mutates_args={"out"}, tags=torch.Tag.out, schema=out_schema
        )
        def scatter_sum_into(src, index, dim, *, out):
            ops.scatter_sum.accumulate(src, index, dim, out)  # adds to out's values: reads them
            return out

        library = torch.library.Library("wb_ch08_out", "FRAGMENT")
        library.define("scatter_sum_maybe(Tensor src, Tensor index, int dim=-1, *, Tensor(a!)? out=None) -> Tensor(a!)")

        def scatter_sum_maybe(src, index, dim=-1, *, out=None):
            if out is None:
                return ops.scatter_sum(src, index, dim, None)
            ops.scatter_sum.accumulate(src, index, dim, out)
            return out

        def fake_scatter_sum_maybe(src, index, dim=-1, *, out=None):
            if out is not None:
                return out
            shape = list(src.shape)
            shape[dim] = torch.library.get_ctx().new_dynamic_size()
            return src.new_empty(shape)

        library.impl("scatter_sum_maybe", scatter_sum_maybe, "CompositeExplicitAutograd")
        torch.library.register_fake("wb_ch08_out::scatter_sum_maybe", fake_scatter_sum_maybe, lib=library)
        _mutating_ops = (scatter_sum_out, scatter_sum_into, library)  # kept: dropping them removes the ops
    return torch.ops.wb_ch08_out


# ---- the stable ABI: run times against the ATen build ----------------------------------------------


def stable_abi_run_times(n: int = 10**6, groups: int = 1000, threads: int | None = None, seed: int = 0) -> list[dict]:
    """ATen vs stable scatter_sum/mean/max on one float32 src of n elements, `groups` groups.

    Both libraries are loaded in this process (different namespaces). dim_size is given, so neither
    op scans the index for its maximum. Seconds are medians (workbook.bench.best_of_rounds), with
    `threads` intra-op threads (None: torch's default). On a machine busy with other work, several
    threads wait for each other's time slices and every op looks alike (~8 ms here); one thread
    compares the code, not the scheduler.
    """
    import torch

    from workbook import bench
    from workbook.ops import scatter, scatter_stable

    aten, stable = scatter.load(), scatter_stable.load()
    generator = torch.Generator().manual_seed(seed)
    env = {
        "aten": aten,
        "stable": stable,
        "src": torch.randn(n, generator=generator),
        "index": torch.randint(0, groups, (n,), generator=generator),
        "groups": groups,
    }
    rows = []
    for op in ("sum", "mean", "max"):
        times = bench.best_of_rounds(
            {
                "aten": (f"aten.scatter_{op}(src, index, 0, dim_size=groups)", env),
                "stable": (f"stable.scatter_{op}(src, index, 0, dim_size=groups)", env),
            },
            threads,
        )
        rows.append(
            {
                "op": f"scatter_{op}",
                "threads": threads or torch.get_num_threads(),
                "aten_s": times["aten"],
                "stable_s": times["stable"],
                "stable/aten": times["stable"] / times["aten"],
            }
        )
    return rows


# ---- a fresh custom op per call, for the exercises ---------------------------------------------------


def segment_sum_reference(src, index):
    """Rows of `src` summed by `index` (1-D, one entry per row); index.max() + 1 rows."""
    rows = int(index.max()) + 1 if index.numel() else 0
    return src.new_zeros((rows, *src.shape[1:])).index_add_(0, index, src)


def segment_sum_fake(src, index):
    """The solution of exercise 8.1, used by the exercise 8.2 check."""
    import torch

    rows = torch.library.get_ctx().new_dynamic_size()
    return src.new_empty((rows, *src.shape[1:]))


def new_segment_sum(*, fake=None, setup_context=None, backward=None):
    """A new custom op `wb_ch08_<n>::segment_sum(Tensor src, Tensor index) -> Tensor`.

    Every call defines it in a namespace of its own, so an exercise cell can be run again after an
    edit without clashing with what an earlier run registered. `fake`, `setup_context` and
    `backward` are registered when given.
    """
    import torch

    name = f"{fresh_namespace.numbered('wb_ch08')}::segment_sum"

    # The schema is spelled out: this module's annotations are strings (from __future__ import annotations).
    @torch.library.custom_op(name, mutates_args=(), schema="(Tensor src, Tensor index) -> Tensor")
    def segment_sum(src, index):
        if index.dim() != 1 or index.shape[0] != src.shape[0]:
            raise ValueError(
                f"segment_sum: index must be 1-D with one entry per row of src "
                f"({src.shape[0]}), got shape {tuple(index.shape)}"
            )
        return segment_sum_reference(src, index)

    if fake is not None:
        segment_sum.register_fake(fake)
    if backward is not None:
        segment_sum.register_autograd(backward, setup_context=setup_context)
    return segment_sum


# ---- torch.export -> AOTInductor package -> the C++ program -----------------------------------------


def package(exported, name: str) -> Path:
    """Compile an ExportedProgram ahead of time into build/ch08/<name>.pt2 and return its path.

    The package carries its input contract (`input_contract`) in its metadata, for `load_package` and
    the C++ program to check inputs against. Like ninja for C++, it skips the work when nothing
    changed: a package compiled earlier from the same program (graph, signature, dynamic ranges,
    weights and constants, torch version; see `program_key`) is reused. AOTInductor takes ~10 s
    even with a warm Inductor cache.
    """
    import torch

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / f"{name}.pt2"
    key_file = path.with_suffix(".key")
    key = program_key(exported)
    if path.exists() and key_file.exists() and key_file.read_text() == key:
        return path
    key_file.unlink(missing_ok=True)
    metadata = contract_metadata(input_contract(exported))
    with warnings.catch_warnings(), progress_line.shown(f"{name}.pt2"):
        # torch 2.13's own packaging code trips over a deprecation in torch.utils._pytree.
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        written = Path(
            torch._inductor.aoti_compile_and_package(
                exported, package_path=str(path), inductor_configs={"aot_inductor.metadata": metadata}
            )
        )
    key_file.write_text(key)
    return written


# The version of what `package` writes besides the compiled program (the contract's format).
_PACKAGE_FORMAT = "contract-1"


def program_key(exported) -> str:
    """A hash of everything an AOTInductor package is compiled from: the printed program (graph with
    every value's dtype, shape, strides and device; signature; range constraints), the values of its
    weights, buffers and constants (a custom object through its __obj_flatten__ state), the torch
    version and the package format.

    The printed graph's comments are left out: they name the file and line each node was traced
    from, which for a model defined in a notebook is a file of the kernel's process
    (/tmp/ipykernel_<pid>/...), new in every session, and which differs between two files defining
    the same model. (str(exported) prints neither strides nor devices, and has those comments.)"""
    import hashlib

    import torch
    from torch.utils._pytree import tree_leaves

    digest = hashlib.sha256(f"{torch.__version__} {_PACKAGE_FORMAT}".encode())
    graph = exported.graph_module.print_readable(
        print_output=False, include_stride=True, include_device=True, colored=False
    )
    printed = [line for line in graph.splitlines() if not line.lstrip().startswith("#")]
    printed += [str(exported.graph_signature), str(exported.range_constraints)]
    digest.update("\n".join(printed).encode())
    for name, value in sorted({**exported.state_dict, **exported.constants}.items()):
        digest.update(name.encode())
        state = value if isinstance(value, torch.Tensor) else value.__obj_flatten__()
        for leaf in tree_leaves(state):
            if isinstance(leaf, torch.Tensor):
                digest.update(str((leaf.dtype, tuple(leaf.shape))).encode())
                digest.update(leaf.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
            else:
                digest.update(repr(leaf).encode())
    return digest.hexdigest()


# ---- what a package expects of its inputs --------------------------------------------------------
# AOTInductor compiles for the dtypes, devices, ranks, sizes and strides of the exported example
# inputs (sizes as ranges where they are dynamic), and by default checks none of it when it runs: a
# float64 tensor fed to a float32 package is read as float32 bits. The contract records those
# expectations in the package's metadata (strings only), one entry per input:
#   "workbook.input.<i>" = "<name> <C++ dtype> <Python dtype> <device> <contiguous|any> <min>:<max>,..."
# with <max> "inf" for an unbounded size. csrc/aoti_app/main.cpp reads the same entries.

UNBOUNDED = None


def _cpp_dtype_name(dtype) -> str:
    """The name c10 gives `dtype` (Float, Double, Long, BFloat16, ...), as C++ prints it."""
    import torch

    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


def input_contract(exported) -> list[dict]:
    """What a package compiled from `exported` expects of each input, in call order: name, dtype,
    device type, whether it must be contiguous, and per dimension the (min, max) sizes it accepts
    (max UNBOUNDED for no upper bound; min == max for a static size)."""
    import sympy
    from torch.utils._sympy.numbers import IntInfinity

    placeholders = {node.name: node.meta["val"] for node in exported.graph.nodes if node.op == "placeholder"}
    contract = []
    for name in exported.graph_signature.user_inputs:
        value = placeholders[name]
        sizes = []
        for size in value.shape:
            expr = size.node.expr if hasattr(size, "node") else sympy.Integer(size)
            if expr.is_number:
                sizes.append((int(expr), int(expr)))
            else:
                bounds = exported.range_constraints[expr]
                upper = UNBOUNDED if isinstance(bounds.upper, IntInfinity) else int(bounds.upper)
                sizes.append((int(bounds.lower), upper))
        contract.append(
            {
                "name": name,
                "dtype": value.dtype,
                "device": value.device.type,
                "contiguous": value.is_contiguous(),
                "sizes": sizes,
            }
        )
    return contract


def contract_metadata(contract) -> dict[str, str]:
    """The contract as AOTInductor package metadata (string keys and values)."""
    metadata = {}
    for i, entry in enumerate(contract):
        sizes = ",".join(f"{low}:{'inf' if high is UNBOUNDED else high}" for low, high in entry["sizes"])
        fields = [
            entry["name"],
            _cpp_dtype_name(entry["dtype"]),
            str(entry["dtype"]).removeprefix("torch."),
            entry["device"],
            "contiguous" if entry["contiguous"] else "any",
            sizes or "-",
        ]
        metadata[f"workbook.input.{i}"] = " ".join(fields)
    return metadata


def contract_from_metadata(metadata: dict) -> list[dict]:
    """The contract `contract_metadata` wrote (empty for a package compiled without one)."""
    import torch

    contract = []
    while f"workbook.input.{len(contract)}" in metadata:
        name, _, dtype, device, layout, sizes = metadata[f"workbook.input.{len(contract)}"].split(" ")
        bounds = [tuple(part.split(":")) for part in sizes.split(",")] if sizes != "-" else []
        contract.append(
            {
                "name": name,
                "dtype": getattr(torch, dtype),
                "device": device,
                "contiguous": layout == "contiguous",
                "sizes": [(int(low), UNBOUNDED if high == "inf" else int(high)) for low, high in bounds],
            }
        )
    return contract


def check_inputs(contract, inputs) -> None:
    """Raise a ValueError naming the first input that breaks `contract`: a missing or extra input, a
    wrong dtype, device or rank, a size outside its range, or a layout the package cannot read."""
    import torch

    if len(inputs) != len(contract):
        names = ", ".join(entry["name"] for entry in contract)
        raise ValueError(f"the package takes {len(contract)} inputs ({names}), got {len(inputs)}")
    for i, (entry, value) in enumerate(zip(contract, inputs)):
        what = f"input {i} ({entry['name']!r})"
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{what} must be a tensor, got {type(value).__name__}")
        if value.dtype != entry["dtype"]:
            raise ValueError(
                f"{what} has dtype {value.dtype}, but the package was compiled for {entry['dtype']} "
                f"(it would read the bytes as {entry['dtype']}): convert it with .to({entry['dtype']})"
            )
        if value.device.type != entry["device"]:
            raise ValueError(f"{what} is on {value.device}, but the package was compiled for {entry['device']}")
        if value.dim() != len(entry["sizes"]):
            raise ValueError(
                f"{what} is {value.dim()}-D (shape {tuple(value.shape)}), but the package expects a "
                f"{len(entry['sizes'])}-D tensor"
            )
        for d, (size, (low, high)) in enumerate(zip(value.shape, entry["sizes"])):
            if size < low or (high is not UNBOUNDED and size > high):
                accepted = f"exactly {low}" if low == high else f"from {low} to {'any size' if high is None else high}"
                raise ValueError(
                    f"{what} has size {size} at dimension {d} (shape {tuple(value.shape)}), outside what the "
                    f"package was exported for: {accepted}"
                )
        if entry["contiguous"] and not value.is_contiguous():
            raise ValueError(
                f"{what} is not contiguous (strides {value.stride()}), and the package reads it as the "
                "row-major layout it was compiled for: pass .contiguous()"
            )


class CheckedPackage:
    """An AOTInductor package loaded in Python that checks every call's inputs against the contract
    the package carries, before running it."""

    def __init__(self, path):
        import torch

        self.path = Path(path)
        self.model = torch._inductor.aoti_load_package(str(path))
        self.contract = contract_from_metadata(self.model.get_metadata())
        if not self.contract:
            raise ValueError(
                f"{strip_repo(str(path))} carries no input contract: compile it with torch_library_compile_export.package"
            )

    def __call__(self, *inputs):
        check_inputs(self.contract, inputs)
        return self.model(*inputs)


@contextlib.contextmanager
def native_stderr_to_stdout():
    """Run the block with the process's C-level stderr caught, then print what it caught to sys.stdout.

    AOTInductor's runtime writes "Error: ..." straight to file descriptor 2 before raising. Jupyter
    forwards such writes from a background thread, so they land in the cell late, in the next cell,
    or not at all; caught here, they are printed in order with the cell's own output, every run.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            print(caught.read().decode(errors="replace"), end="")


def load_package(path) -> CheckedPackage:
    """Load a package written by `package`; calling it checks the inputs first (see `check_inputs`)."""
    return CheckedPackage(path)


def aoti_app() -> Path:
    """Build csrc/aoti_app with CMake (once; ninja and ccache make later calls cheap); its path."""
    return cmake_build("aoti_app", CSRC_DIR / "aoti_app") / "aoti_app"


def run_aoti_app(package_path, inputs, *, libraries=(), check=True) -> subprocess.CompletedProcess:
    """Run the C++ program on a .pt2 package.

    `inputs` (the model's input tensors) is written with torch.save next to the package; the program
    dlopens `libraries` in order, runs the package and writes the outputs (a list of tensors, read
    back with `read_outputs`). Paths in its messages are printed relative to the repository.
    """
    import torch

    package_path = Path(package_path)
    inputs_path = package_path.with_suffix(".in.pt")
    torch.save(list(inputs), inputs_path)
    output_path = package_path.with_suffix(".out.pt")
    output_path.unlink(missing_ok=True)
    command = [str(aoti_app()), str(package_path), str(inputs_path), str(output_path), *map(str, libraries)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    result.stdout, result.stderr = strip_repo(result.stdout), strip_repo(result.stderr)
    if check and result.returncode != 0:
        raise RuntimeError(f"aoti_app failed (exit code {result.returncode}):\n{result.stderr.strip()}")
    return result


def read_outputs(package_path) -> list:
    """The tensors the C++ program wrote for `package_path`."""
    import torch
    from torch.jit import _pickle

    # torch::pickle_save writes a typed list (build_tensorlist): allow that builder in torch.load.
    with torch.serialization.safe_globals([_pickle.build_tensorlist]):
        return list(torch.load(Path(package_path).with_suffix(".out.pt")))
