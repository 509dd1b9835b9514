"""Chapter 11: the workbook's kernels written in Triton, and registered as PyTorch operators.

    from workbook.ops import triton_kernels as tk    # import it before triton (see below)
    tk.INTERPRETED, tk.DEVICE                    # Triton's CPU interpreter in use?  where the tensors go

    new_h, new_cell, gates, X = tk.lltm_forward(input, weights, bias, old_h, old_cell)
    d_old_h, d_input, d_weights, d_bias, d_old_cell = tk.lltm_backward(grad_h, grad_cell, new_cell, gates, X, weights)
    out = tk.scatter_sum(src, index, dim_size)        # along dim 0, with tl.atomic_add
    sorted_src, offsets = tk.sort_by_group(src, index, dim_size)
    out = tk.segment_sum(sorted_src, offsets)         # the same sums from sorted rows, without atomics
    y = tk.softmax(x)                                 # each row of a 2-D tensor, one program per row

    tk.lltm_cell(*args, ops=torch.ops.wb_triton_opaque)   # custom_op: opaque to torch.compile, works anywhere
    tk.lltm_cell(*args, ops=torch.ops.wb_triton)          # triton_op + wrap_triton: compile and export trace
                                                          # into the kernels (needs compiled kernels: a GPU)
    torch.export.export(tk.LLTMCell(torch.ops.wb_triton), args)   # the cell as a module
    op = tk.new_softmax_op(fake=..., setup_context=..., backward=...)   # exercise 11.3
    with tk.watch_memory(x=x, out=out) as report: ...     # the interpreter's loads and stores, checked

Without a CUDA GPU, importing this module sets TRITON_INTERPRET=1 unless it is set already. Triton reads
it when `@triton.jit` wraps a function: with it, a kernel becomes an InterpretedFunction that runs each
program of the grid one after another on the CPU, with NumPy arrays for its blocks. triton.language wraps its
own helpers (tl.sigmoid, tl.sum, ...) that way when it is imported, and torch.compile imports it: so the switch
must come before anything imports triton, which this module checks (tests/conftest.py makes it for the tests).
"""

import contextlib
import os
from dataclasses import dataclass, field

import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402  (after the switch above)
import triton.language as tl  # noqa: E402
from torch.library import triton_op, wrap_triton  # noqa: E402

from workbook import build  # noqa: E402
from workbook.build import fresh_namespace  # noqa: E402
from workbook.ops import lltm  # noqa: E402

INTERPRETED = bool(triton.knobs.runtime.interpret)


def _check_triton_language_matches() -> None:
    """triton.language wraps its own helpers (tl.sigmoid, tl.sum, ...) with @triton.jit when it is imported:
    imported before the switch, they are compiled-only and cannot run inside an interpreted kernel."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(tl.sigmoid, InterpretedFunction) != INTERPRETED:
        raise ImportError(
            "triton.language was imported before TRITON_INTERPRET was set (torch.compile imports it), so its "
            "own helpers and this module's kernels disagree about the interpreter. Restart Python and import "
            "workbook.ops.triton_kernels (or set TRITON_INTERPRET=1) before anything uses triton or torch.compile"
        )


_check_triton_language_matches()
# The interpreter runs kernels on CPU tensors; compiled kernels need CUDA tensors.
DEVICE = "cuda" if HAS_GPU and not INTERPRETED else "cpu"
build.use_inductor_cache()

BLOCK = 256  # elements per program in the elementwise kernels
SOFTMAX_MAX_COLUMNS = 16384  # one block holds a whole row; wider rows need a loop (exercise 11.2)
FLOAT_DTYPES = (torch.float32, torch.float64)


def is_kernel(kernel) -> bool:
    """Whether `kernel` is a `@triton.jit` function (compiled or interpreted)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(kernel, (JITFunction, InterpretedFunction))


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_floats(op: str, **tensors) -> None:
    """All tensors share one floating dtype (float32 or float64) and one device."""
    (first_name, first), *_ = tensors.items()
    _check(first.dtype in FLOAT_DTYPES, f"{op}: {first_name} must be float32 or float64, got {first.dtype}")
    for name, tensor in tensors.items():
        _check(
            tensor.dtype == first.dtype and tensor.device == first.device,
            f"{op}: {name} is a {tensor.dtype} tensor on {tensor.device} but {first_name} is a {first.dtype} "
            f"tensor on {first.device}; all must share dtype and device",
        )


def _check_shapes(op: str, expected: dict) -> None:
    for name, (tensor, shape) in expected.items():
        _check(
            tuple(tensor.shape) == tuple(shape),
            f"{op}: {name} must have shape {tuple(shape)}, got {tuple(tensor.shape)}",
        )


# ---- the LLTM cell's elementwise steps (chapter 05's CUDA kernels, csrc/lltm/cuda/lltm_cuda.cu) -----------


@triton.jit
def _tanh(x):
    # Triton's interpreter runs core triton.language only; libdevice's tanh and expm1 need a GPU compiler.
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def lltm_forward_kernel(gates_ptr, old_cell_ptr, new_h_ptr, new_cell_ptr, n, state_size, BLOCK: tl.constexpr):
    # This program's BLOCK elements k of the (batch, state_size) state; element k lies in row k // state_size.
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = k < n
    # gates is (batch, 3 * state_size), each row [input | output | candidate]: three loads per element.
    gate = gates_ptr + (k // state_size) * 3 * state_size + k % state_size
    input_gate = tl.sigmoid(tl.load(gate, mask=inside))
    output_gate = tl.sigmoid(tl.load(gate + state_size, mask=inside))
    pre = tl.load(gate + 2 * state_size, mask=inside)
    candidate = tl.where(pre > 0, pre, tl.exp(pre) - 1)  # elu with alpha = 1
    new_cell = tl.load(old_cell_ptr + k, mask=inside) + candidate * input_gate
    # The activated gates replace the pre-activations, where the backward finds them.
    tl.store(gate, input_gate, mask=inside)
    tl.store(gate + state_size, output_gate, mask=inside)
    tl.store(gate + 2 * state_size, candidate, mask=inside)
    tl.store(new_cell_ptr + k, new_cell, mask=inside)
    tl.store(new_h_ptr + k, _tanh(new_cell) * output_gate, mask=inside)


@triton.jit
def lltm_backward_kernel(
    grad_h_ptr, grad_cell_ptr, new_cell_ptr, gates_ptr, d_gates_ptr, d_old_cell_ptr, n, state_size, BLOCK: tl.constexpr
):
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = k < n
    offset = (k // state_size) * 3 * state_size + k % state_size  # the input gate's column in gates and d_gates
    input_gate = tl.load(gates_ptr + offset, mask=inside)
    output_gate = tl.load(gates_ptr + offset + state_size, mask=inside)
    candidate = tl.load(gates_ptr + offset + 2 * state_size, mask=inside)
    grad_h = tl.load(grad_h_ptr + k, mask=inside)
    tanh_cell = _tanh(tl.load(new_cell_ptr + k, mask=inside))
    # new_h = tanh(new_cell) * output_gate: the gradient reaches new_cell through tanh and adds to grad_cell.
    d_cell = tl.load(grad_cell_ptr + k, mask=inside) + grad_h * output_gate * (1 - tanh_cell * tanh_cell)
    elu_slope = tl.where(candidate > 0, 1.0, candidate + 1)  # elu'(x) = exp(x) = elu(x) + 1 for x <= 0
    tl.store(d_gates_ptr + offset, d_cell * candidate * input_gate * (1 - input_gate), mask=inside)
    tl.store(d_gates_ptr + offset + state_size, grad_h * tanh_cell * output_gate * (1 - output_gate), mask=inside)
    tl.store(d_gates_ptr + offset + 2 * state_size, d_cell * input_gate * elu_slope, mask=inside)
    tl.store(d_old_cell_ptr + k, d_cell, mask=inside)


def lltm_forward(input, weights, bias, old_h, old_cell):
    """(new_h, new_cell, gates, X) of the LLTM cell, like torch.ops.wb_lltm.lltm_forward: the matrix
    product in torch, the elementwise steps in one Triton kernel."""
    _check(input.dim() == 2 and old_h.dim() == 2, "lltm_forward: input and old_h must be 2-D")
    (batch_size, input_features), state_size = input.shape, old_h.shape[1]
    _check_floats("lltm_forward", input=input, weights=weights, bias=bias, old_h=old_h, old_cell=old_cell)
    _check_shapes(
        "lltm_forward",
        {
            "weights": (weights, (3 * state_size, state_size + input_features)),
            "bias": (bias, (3 * state_size,)),
            "old_h": (old_h, (batch_size, state_size)),
            "old_cell": (old_cell, (batch_size, state_size)),
        },
    )
    X = torch.cat([old_h, input], dim=1)
    gates = torch.addmm(bias, X, weights.t())  # fresh and contiguous: the kernel overwrites it
    old_cell = old_cell.contiguous()
    new_h, new_cell = gates.new_empty(batch_size, state_size), gates.new_empty(batch_size, state_size)
    n = batch_size * state_size
    if n:
        # wrap_triton: inside a triton_op it records the launch for torch.compile/export; elsewhere it
        # returns the kernel itself.
        wrap_triton(lltm_forward_kernel)[(triton.cdiv(n, BLOCK),)](
            gates, old_cell, new_h, new_cell, n, state_size, BLOCK=BLOCK
        )
    return new_h, new_cell, gates, X


def lltm_backward(grad_h, grad_cell, new_cell, gates, X, weights):
    """(d_old_h, d_input, d_weights, d_bias, d_old_cell), like torch.ops.wb_lltm.lltm_backward."""
    _check(grad_h.dim() == 2, "lltm_backward: grad_h must be 2-D")
    (batch_size, state_size), input_features = grad_h.shape, X.shape[1] - grad_h.shape[1]
    _check_floats(
        "lltm_backward", grad_h=grad_h, grad_cell=grad_cell, new_cell=new_cell, gates=gates, X=X, weights=weights
    )
    _check_shapes(
        "lltm_backward",
        {
            "grad_cell": (grad_cell, (batch_size, state_size)),
            "new_cell": (new_cell, (batch_size, state_size)),
            "gates": (gates, (batch_size, 3 * state_size)),
            "X": (X, (batch_size, state_size + input_features)),
            "weights": (weights, (3 * state_size, state_size + input_features)),
        },
    )
    # Incoming gradients are often not contiguous (the gradient of .sum() is expanded, with stride 0).
    grad_h, grad_cell, new_cell, gates = (t.contiguous() for t in (grad_h, grad_cell, new_cell, gates))
    d_gates, d_old_cell = grad_h.new_empty(batch_size, 3 * state_size), grad_h.new_empty(batch_size, state_size)
    n = batch_size * state_size
    if n:
        wrap_triton(lltm_backward_kernel)[(triton.cdiv(n, BLOCK),)](
            grad_h, grad_cell, new_cell, gates, d_gates, d_old_cell, n, state_size, BLOCK=BLOCK
        )
    # gates = X @ weights.T + bias: the rest of the gradient is matrix products, as in csrc/lltm/lltm_glue.h.
    d_old_h = d_gates @ weights[:, :state_size]
    d_input = d_gates @ weights[:, state_size:]
    return d_old_h, d_input, d_gates.t() @ X, d_gates.sum(0), d_old_cell


# ---- scatter_sum: with atomics, and from sorted rows without them ------------------------------------------


@triton.jit
def scatter_add_kernel(src_ptr, index_ptr, out_ptr, rows, features, BLOCK_ROWS: tl.constexpr, BLOCK_F: tl.constexpr):
    # A 2-D grid: program (r, f) adds a BLOCK_ROWS x BLOCK_F tile of src into the rows of out its index names.
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    row_inside, col_inside = row < rows, col < features
    inside = row_inside[:, None] & col_inside[None, :]  # broadcasting, as in torch
    group = tl.load(index_ptr + row, mask=row_inside)
    values = tl.load(src_ptr + row[:, None] * features + col[None, :], mask=inside)
    # Rows of one tile, and tiles of other programs, may name the same group: add atomically.
    tl.atomic_add(out_ptr + group[:, None] * features + col[None, :], values, mask=inside)


@triton.jit
def segment_sum_kernel(src_ptr, offsets_ptr, out_ptr, features, BLOCK_ROWS: tl.constexpr, BLOCK_F: tl.constexpr):
    # Program (g, f) owns group g: its rows are src[offsets[g]:offsets[g + 1]], summed in registers.
    group = tl.program_id(0)
    col = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    col_inside = col < features
    start, end = tl.load(offsets_ptr + group), tl.load(offsets_ptr + group + 1)
    total = tl.zeros((BLOCK_F,), dtype=out_ptr.dtype.element_ty)
    for first in range(start, end, BLOCK_ROWS):  # bounds known only at run time: a real loop
        row = first + tl.arange(0, BLOCK_ROWS)
        inside = (row < end)[:, None] & col_inside[None, :]
        tile = tl.load(src_ptr + row[:, None] * features + col[None, :], mask=inside, other=0)
        total += tl.sum(tile, axis=0)
    tl.store(out_ptr + group * features + col, total, mask=col_inside)  # one plain store per group: no atomics


def _as_rows(src):
    """src as a contiguous (rows, features) matrix: a 1-D src is one feature per row."""
    _check(src.dim() in (1, 2), f"src must be 1-D or 2-D, got shape {tuple(src.shape)}")
    _check(src.dtype in FLOAT_DTYPES, f"src must be float32 or float64, got {src.dtype}")
    return (src if src.dim() == 2 else src.unsqueeze(1)).contiguous()


def _check_index(index, src, dim_size):
    _check(index.dtype == torch.int64, f"index must be int64, got {index.dtype}")
    _check(index.device == src.device, f"index is on {index.device} but src is on {src.device}")
    _check(
        index.shape == (src.shape[0],),
        f"index must be 1-D with one entry per row of src ({src.shape[0]}), got shape {tuple(index.shape)}",
    )
    _check(isinstance(dim_size, int) and dim_size >= 0, f"dim_size must be an int >= 0, got {dim_size!r}")
    # A kernel cannot raise: an index outside [0, dim_size) would write outside out. Check first.
    outside = ((index < 0) | (index >= dim_size)).nonzero()
    if len(outside):
        position = int(outside[0])
        raise ValueError(
            f"index value {int(index[position])} at position {position} is out of range: "
            f"index values must lie in [0, dim_size) = [0, {dim_size})"
        )


def scatter_sum(src, index, dim_size):
    """out[g] = the sum of the rows src[e] with index[e] == g, for g in [0, dim_size): scatter_sum along dim 0."""
    rows_of_src = _as_rows(src)
    _check_index(index, src, dim_size)
    rows, features = rows_of_src.shape
    out = rows_of_src.new_zeros(dim_size, features)
    if rows and features:
        grid = (triton.cdiv(rows, 64), triton.cdiv(features, 16))
        wrap_triton(scatter_add_kernel)[grid](
            rows_of_src, index.contiguous(), out, rows, features, BLOCK_ROWS=64, BLOCK_F=16
        )
    return out if src.dim() == 2 else out.squeeze(1)


def sort_by_group(src, index, dim_size):
    """(src's rows in the order of their group, offsets): group g's rows are sorted[offsets[g]:offsets[g + 1]].

    The layout of a CSR matrix. Sorting costs a pass of its own; it pays when the order is used many
    times (a graph's edges sorted by target once, then aggregated in every layer).
    """
    _check_index(index, _as_rows(src), dim_size)
    sorted_index, order = index.sort(stable=True)
    offsets = index.new_zeros(dim_size + 1)
    offsets[1:] = torch.bincount(sorted_index, minlength=dim_size).cumsum(0)
    return src[order], offsets


def segment_sum(sorted_src, offsets):
    """The sums of sort_by_group's segments: one program per group (and block of features), no atomics."""
    rows_of_src = _as_rows(sorted_src)
    _check(
        offsets.dtype == torch.int64 and offsets.dim() == 1 and len(offsets) >= 1,
        "offsets must be a 1-D int64 tensor of dim_size + 1 entries",
    )
    _check(
        bool(offsets[0] == 0) and bool(offsets[-1] == len(rows_of_src)) and bool((offsets.diff() >= 0).all()),
        f"offsets must rise from 0 to the number of rows ({len(rows_of_src)})",
    )
    dim_size, features = len(offsets) - 1, rows_of_src.shape[1]
    out = rows_of_src.new_empty(dim_size, features)
    if dim_size and features:
        grid = (dim_size, triton.cdiv(features, 16))
        wrap_triton(segment_sum_kernel)[grid](
            rows_of_src, offsets.contiguous(), out, features, BLOCK_ROWS=32, BLOCK_F=16
        )
    return out if sorted_src.dim() == 2 else out.squeeze(1)


# ---- a numerically stable row softmax ---------------------------------------------------------------------


@triton.jit
def softmax_kernel(x_ptr, y_ptr, columns, x_row_stride, y_row_stride, BLOCK: tl.constexpr):
    # One program per row; the whole row fits in one block (BLOCK >= columns, a power of two).
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    inside = col < columns
    # Lanes past the row's end read -inf: they cannot win the max, and exp(-inf) = 0 adds nothing to the sum.
    x = tl.load(x_ptr + row * x_row_stride + col, mask=inside, other=-float("inf"))
    shifted = x - tl.max(x, axis=0)  # the largest becomes 0: exp cannot overflow
    numerator = tl.exp(shifted)
    tl.store(y_ptr + row * y_row_stride + col, numerator / tl.sum(numerator, axis=0), mask=inside)


def softmax(x):
    """torch.softmax(x, dim=1) for a 2-D float32/float64 tensor with at most SOFTMAX_MAX_COLUMNS columns."""
    _check(x.dim() == 2, f"softmax: x must be 2-D, got shape {tuple(x.shape)}")
    _check(x.dtype in FLOAT_DTYPES, f"softmax: x must be float32 or float64, got {x.dtype}")
    rows, columns = x.shape
    _check(
        columns <= SOFTMAX_MAX_COLUMNS,
        f"softmax: rows of {columns} columns do not fit in one block (at most {SOFTMAX_MAX_COLUMNS}); "
        "a kernel that loops over each row in blocks handles them (exercise 11.2)",
    )
    if x.stride(1) != 1:
        x = x.contiguous()  # the kernel steps through a row one element at a time
    y = x.new_empty(rows, columns)
    if rows and columns:
        wrap_triton(softmax_kernel)[(rows,)](
            x, y, columns, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(columns)
        )
    return y


# ---- registration: an opaque custom_op, and a triton_op that torch.compile can trace ----------------------
# Both return what torch.ops.wb_lltm's ops return, so that op's fake kernels and lltm._forward_setup_context
# (workbook/ops/lltm.py) fit them.


def _no_double_backward(ctx, *grads):
    raise RuntimeError("lltm_backward is not differentiable: the LLTM cell has first derivatives only")


def _register_lltm(namespace, define):
    """Define lltm_forward and lltm_backward in `namespace` with `define` (custom_op or triton_op) and wire
    the forward's autograd to the backward; returns the two ops."""
    forward = define(f"{namespace}::lltm_forward", mutates_args=())(_lltm_forward_op)
    backward = define(f"{namespace}::lltm_backward", mutates_args=())(_lltm_backward_op)

    def backward_formula(ctx, grad_h, grad_cell, grad_gates, grad_X):
        d_old_h, d_input, d_weights, d_bias, d_old_cell = backward(grad_h, grad_cell, *ctx.saved_tensors)
        return d_input, d_weights, d_bias, d_old_h, d_old_cell  # in the order of lltm_forward's inputs

    forward.register_autograd(backward_formula, setup_context=lltm._forward_setup_context)
    backward.register_autograd(_no_double_backward, setup_context=lambda ctx, inputs, output: None)
    return forward, backward


def _lltm_forward_op(
    input: torch.Tensor, weights: torch.Tensor, bias: torch.Tensor, old_h: torch.Tensor, old_cell: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return lltm_forward(input, weights, bias, old_h, old_cell)


def _lltm_backward_op(
    grad_h: torch.Tensor,
    grad_cell: torch.Tensor,
    new_cell: torch.Tensor,
    gates: torch.Tensor,
    X: torch.Tensor,
    weights: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return lltm_backward(grad_h, grad_cell, new_cell, gates, X, weights)


# custom_op: torch.compile and torch.export see one opaque node and ask its fake kernel for the output shapes.
opaque_lltm_forward, opaque_lltm_backward = _register_lltm("wb_triton_opaque", torch.library.custom_op)
opaque_lltm_forward.register_fake(lltm._fake_forward)
opaque_lltm_backward.register_fake(lltm._fake_backward)

# triton_op: torch.compile and torch.export trace the function itself, with each wrap_triton launch recorded
# as a kernel call. No fake kernel: tracing runs the body on fake tensors, and that needs compiled kernels.
traced_lltm_forward, traced_lltm_backward = _register_lltm("wb_triton", triton_op)


@contextlib.contextmanager
def quiet_tracing_errors():
    """Silence what torch logs and warns on the way when a trace runs into an interpreted kernel; the error
    itself is still raised."""
    import logging
    import warnings

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def lltm_cell(input, weights, bias, old_h, old_cell, *, ops):
    """(new_h, new_cell) through `ops.lltm_forward`, with `ops` torch.ops.wb_triton_opaque or torch.ops.wb_triton."""
    new_h, new_cell, _, _ = ops.lltm_forward(input, weights, bias, old_h, old_cell)
    return new_h, new_cell


class LLTMCell(torch.nn.Module):
    """The LLTM cell through `ops` (torch.ops.wb_triton_opaque or torch.ops.wb_triton), as a module to export."""

    def __init__(self, ops):
        super().__init__()
        self.ops = ops

    def forward(self, input, weights, bias, old_h, old_cell):
        return lltm_cell(input, weights, bias, old_h, old_cell, ops=self.ops)


def new_softmax_op(*, fake=None, setup_context=None, backward=None):
    """A new custom op `wb_ch11_<n>::softmax(Tensor x) -> Tensor` that launches softmax_kernel.

    Each call defines it in a namespace of its own, so an exercise cell can be run again after an edit.
    `fake`, `setup_context` and `backward` are registered when given.
    """
    name = f"{fresh_namespace.numbered('wb_ch11')}::softmax"

    @torch.library.custom_op(name, mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        return softmax(x)

    if fake is not None:
        op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    return op


# ---- the interpreter's memory accesses, checked against the tensors a kernel was given --------------------


@dataclass
class MemoryReport:
    """What `watch_memory` saw: lanes loaded and stored, and those outside every watched tensor (strays)."""

    loads: int = 0
    stores: int = 0
    strays: int = 0
    first_stray: str | None = None  # in words: "a store 2 element(s) past the end of out"
    ranges: list = field(default_factory=list)  # (first byte, end byte, name) of each watched tensor

    def admit(self, kind: str, addresses, mask, item_size: int):
        """Count the lanes of one access; return the mask with the stray lanes turned off."""
        import numpy as np

        mask = np.asarray(mask, dtype=bool)
        addresses = np.broadcast_to(np.asarray(addresses).astype(np.int64), mask.shape)
        inside = np.zeros(mask.shape, dtype=bool)
        for start, end, _ in self.ranges:
            inside |= (addresses >= start) & (addresses + item_size <= end)
        if kind == "load":
            self.loads += int(mask.sum())
        else:
            self.stores += int(mask.sum())
        strays = addresses[mask & ~inside]
        self.strays += len(strays)
        if len(strays) and self.first_stray is None:
            self.first_stray = f"{'an' if kind == 'atomic' else 'a'} {kind} {self._where(int(strays[0]), item_size)}"
        return mask & inside

    def _where(self, address: int, item_size: int) -> str:
        if not self.ranges:
            return "with no tensor watched"
        start, end, name = min(self.ranges, key=lambda r: min(abs(address - r[0]), abs(address - r[1])))
        if address >= end:
            return f"{(address - end) // item_size + 1} element(s) past the end of {name}"
        return f"{-(-(start - address) // item_size)} element(s) before the start of {name}"


@contextlib.contextmanager
def watch_memory(**tensors):
    """Check every load, store and atomic of interpreted kernels run in the block against the named CPU tensors.

    The interpreter checks no bounds: an unmasked load past a tensor's end reads whatever memory lies there,
    and a store overwrites it. Watched, each such lane is counted, the first one described, and the access
    skipped (a load gives 0), so a wrong kernel cannot corrupt the process. Interpreter only (Triton 3.9):
    a compiled kernel runs on the GPU, out of Python's sight.
    """
    from triton.runtime import interpreter

    if not INTERPRETED:
        raise RuntimeError("watch_memory needs Triton's interpreter (TRITON_INTERPRET=1 before triton is imported)")
    report = MemoryReport()
    for name, tensor in tensors.items():
        _check(tensor.device.type == "cpu", f"watch_memory: {name} must be a CPU tensor, got one on {tensor.device}")
        if tensor.numel():
            extent = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
            report.ranges.append((tensor.data_ptr(), tensor.data_ptr() + extent * tensor.element_size(), name))
    builder = interpreter.interpreter_builder
    load, store, atomic = builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw

    def admitted(kind, ptrs, mask):
        item_size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        return interpreter.TensorHandle(report.admit(kind, ptrs.data, mask.data, item_size), mask.dtype)

    builder.create_masked_load = lambda ptrs, mask, *rest: load(ptrs, admitted("load", ptrs, mask), *rest)
    builder.create_masked_store = lambda ptrs, value, mask, *rest: store(
        ptrs, value, admitted("store", ptrs, mask), *rest
    )
    builder.create_atomic_rmw = lambda op, ptrs, value, mask, *rest: atomic(
        op, ptrs, value, admitted("atomic", ptrs, mask), *rest
    )
    try:
        yield report
    finally:
        del builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw
