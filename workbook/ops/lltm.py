"""The LLTM recurrent cell of chapter 02, in pure PyTorch and in C++ (csrc/lltm/).

The cell, for inputs ``input`` (batch, input_features) and a state ``old_h``, ``old_cell`` (each
(batch, state_size)), with ``weights`` (3 * state_size, state_size + input_features) and ``bias``
(3 * state_size)::

    X            = cat([old_h, input], dim=1)
    gate_weights = X @ weights.T + bias
    input_gate, output_gate, candidate = gate_weights.chunk(3, dim=1)
    input_gate, output_gate, candidate = sigmoid(input_gate), sigmoid(output_gate), elu(candidate)
    new_cell     = old_cell + candidate * input_gate
    new_h        = tanh(new_cell) * output_gate

API (used by chapter 02, tests/test_lltm.py and the benchmark):

    from workbook.ops import lltm
    ext = lltm.load_extension()        # build (first time) and import the C++ extension `wb_lltm`;
                                       # ext.forward / ext.backward are its pybind11 functions
    args = lltm.make_inputs(batch_size=16, input_features=32, state_size=128,
                            dtype=torch.float32, requires_grad=True, seed=0)
    new_h, new_cell = lltm.lltm_python(*args)   # reference: torch functions, autograd backward
    new_h, new_cell = lltm.lltm_cpp(*args)      # C++ forward and backward (LLTMFunction.apply)
    new_h, new_cell = lltm.lltm_op(*args)       # the op itself, torch.ops.wb_lltm.lltm_forward:
                                                # differentiable, and torch.compile/export-ready
    library = lltm.ops_library()                # the ops as a library without Python, for C++ programs
    cell = lltm.LLTMCpp(32, 128)                # nn.Modules with identical parameters/init;
    cell = lltm.LLTMPython(32, 128)             # cell(input, (old_h, old_cell)) -> (new_h, new_cell)

`args` is the tuple ``(input, weights, bias, old_h, old_cell)``; all functions take it in that order.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from workbook import CSRC_DIR, build

EXTENSION_NAME = "wb_lltm"  # also the TORCH_LIBRARY namespace: torch.ops.wb_lltm.*
# The schema, the pybind11 bindings and the CPU kernels (ops_library() builds all but the bindings).
CPP_SOURCES = ["csrc/lltm/lltm.cpp", "csrc/lltm/lltm_python.cpp", "csrc/lltm/cpu/lltm_cpu.cpp"]


def cpu_flags() -> list[str]:
    """Compiler flags for csrc/lltm/cpu/lltm_cpu.cpp on this machine.

    -O2: the elementwise loops in cpu/lltm_cpu.cpp are our code, not calls into the optimised ATen
    library, and load() passes no -O flag of its own (gcc then does not optimise).
    The loops use at::vec::Vectorized, which emits SIMD instructions only when a CPU_CAPABILITY_*
    macro says which, and the compiler is allowed to use them. The flags follow the instruction set
    ATen itself uses here (torch.backends.cpu.get_cpu_capability(); AVX512 machines get the 256-bit
    AVX2 code, which they run too). On ARM (aarch64) the header picks NEON by itself; on an x86
    machine without AVX2 the loops compile to scalar code: correct, but slower than ATen's separate
    kernels. The extension is built on the machine that runs it, so these flags never name
    instructions it lacks.
    """
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        return ["-O2", "-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    return ["-O2"]


# -fopenmp (compile and link): at::parallel_for is inline code that splits the rows over threads only
# when compiled with OpenMP; without it, every chunk runs on the calling thread.
EXTRA_CFLAGS = cpu_flags() + ["-fopenmp"]

_extension = None


def cuda_source_paths() -> list[str]:
    """The CUDA kernels of the extension that exist in csrc/lltm/cuda/, relative to the repository."""
    return [f"csrc/lltm/cuda/{path.name}" for path in sorted((CSRC_DIR / "lltm" / "cuda").glob("*.cu"))]


def load_extension():
    """Build (when sources changed) and import the `wb_lltm` extension; cached per process.

    Importing it also registers the ops torch.ops.wb_lltm.lltm_forward / lltm_backward, and this
    function then adds their Python parts (`register_python_kernels`).
    """
    global _extension
    if _extension is None:
        sources = CPP_SOURCES + build.cuda_sources(EXTENSION_NAME, cuda_source_paths())
        _extension = build.load(
            EXTENSION_NAME, sources, extra_cflags=EXTRA_CFLAGS, extra_ldflags=["-fopenmp"], extra_cuda_cflags=["-O2"]
        )
        register_python_kernels()
    return _extension


def ops_library():
    """Build the ops as a plain shared library (schema, autograd, CPU kernels; no Python) with CMake; return its path.

    For C++ programs (dlopen it, or link it with -Wl,--no-as-needed). It is not loaded here: this
    process may hold the extension module already, and a second registration of the namespace
    wb_lltm would abort the process.
    """
    simd_flags = [flag for flag in cpu_flags() if not flag.startswith("-O")]  # CMake's Release sets -O
    build_dir = build.cmake_build("wb_lltm_ops", CSRC_DIR / "lltm", options={"WB_LLTM_CPU_FLAGS": ";".join(simd_flags)})
    return build_dir / "libwb_lltm_ops.so"


# ---- Python parts of the ops: fake kernels and autocast ----------------------------------------
# The autograd kernels are C++ (csrc/lltm/lltm.cpp). The fake kernels are Python rather than C++ Meta
# kernels: a fake kernel only computes output shapes, and under torch.compile(dynamic=True) those
# shapes are symbolic (SymInt). Python arithmetic on them needs no special care, while a C++ Meta
# kernel would need SymInt-aware twins of every size check in lltm_checks.h.

_registered = False


def _check_dims(op, **tensors):
    """The checks of csrc/lltm/lltm_checks.h that need no sizes: rank, and the first argument's dtype and device."""
    (first_name, (first, _)), *_ = tensors.items()
    for name, (tensor, dim) in tensors.items():
        torch._check(tensor.dim() == dim, lambda: f"{op}: {name} must be {dim}-D, got shape {tuple(tensor.shape)}")
        torch._check(
            tensor.dtype == first.dtype and tensor.device == first.device,
            lambda: (
                f"{op}: {name} is a {tensor.dtype} tensor on {tensor.device} but {first_name} is a "
                f"{first.dtype} tensor on {first.device}; all arguments must share dtype and device"
            ),
        )


def _fake_forward(input, weights, bias, old_h, old_cell):
    _check_dims(
        "lltm_forward", input=(input, 2), weights=(weights, 2), bias=(bias, 1), old_h=(old_h, 2), old_cell=(old_cell, 2)
    )
    batch_size, input_features = input.shape
    state_size = old_h.shape[1]
    # Fresh contiguous tensors of the input's dtype and device, as the kernels return.
    return (
        input.new_empty(batch_size, state_size),  # new_h
        input.new_empty(batch_size, state_size),  # new_cell
        input.new_empty(batch_size, 3 * state_size),  # gates
        input.new_empty(batch_size, state_size + input_features),  # X
    )


def _fake_backward(grad_h, grad_cell, new_cell, gates, X, weights):
    _check_dims(
        "lltm_backward",
        grad_h=(grad_h, 2),
        grad_cell=(grad_cell, 2),
        new_cell=(new_cell, 2),
        gates=(gates, 2),
        X=(X, 2),
        weights=(weights, 2),
    )
    batch_size, state_size = grad_h.shape
    input_features = X.shape[1] - state_size
    return (
        grad_h.new_empty(batch_size, state_size),  # d_old_h
        grad_h.new_empty(batch_size, input_features),  # d_input
        grad_h.new_empty(3 * state_size, state_size + input_features),  # d_weights
        grad_h.new_empty(3 * state_size),  # d_bias
        grad_h.new_empty(batch_size, state_size),  # d_old_cell
    )


def _forward_setup_context(ctx, inputs, output):
    """What lltm_forward's autograd kernel (csrc/lltm/lltm.cpp) keeps for the backward, for ops with the
    same inputs and outputs whose autograd is registered from Python (chapter 11's Triton LLTM ops)."""
    weights = inputs[1]
    _, new_cell, gates, X = output
    ctx.save_for_backward(new_cell, gates, X, weights)
    ctx.mark_non_differentiable(gates, X)  # why: LLTMForward::forward in csrc/lltm/lltm.cpp


def register_python_kernels():
    """Register the fake kernels and the autocast rule of the wb_lltm ops (once per process).

    Needs the ops' schema in this process (load_extension() calls it after loading).
    """
    global _registered
    if _registered:
        return
    torch.library.register_fake("wb_lltm::lltm_forward", _fake_forward)
    torch.library.register_fake("wb_lltm::lltm_backward", _fake_backward)
    # Under torch.autocast the ops before the cell may return lower-precision tensors while its
    # weights stay float32, and the kernels refuse mixed dtypes. Autocast rules: cast every
    # floating-point input to one dtype first (autocast's default on each device; the kernels take both).
    for device_type, dtype in AUTOCAST_DTYPES.items():
        if torch.amp.is_autocast_available(device_type):
            torch.library.register_autocast("wb_lltm::lltm_forward", device_type, dtype)
    _registered = True


# The dtype lltm_forward computes in inside a torch.autocast region, per device type.
AUTOCAST_DTYPES = {"cpu": torch.bfloat16, "cuda": torch.float16}


def make_inputs(
    batch_size=16, input_features=32, state_size=128, *, dtype=torch.float32, device="cpu", requires_grad=False, seed=0
):
    """Random (input, weights, bias, old_h, old_cell) of consistent shapes, from a fixed seed."""
    generator = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(max(state_size, 1))

    def uniform(*shape, scale=1.0):
        tensor = (torch.rand(*shape, generator=generator, dtype=torch.float64) * 2 - 1) * scale
        return tensor.to(dtype=dtype, device=device).requires_grad_(requires_grad)

    return (
        uniform(batch_size, input_features),
        uniform(3 * state_size, state_size + input_features, scale=bound),
        uniform(3 * state_size, scale=bound),
        uniform(batch_size, state_size),
        uniform(batch_size, state_size),
    )


def lltm_python(input, weights, bias, old_h, old_cell):
    """The reference LLTM cell in torch functions; autograd derives its backward."""
    X = torch.cat([old_h, input], dim=1)
    gate_weights = F.linear(X, weights, bias)
    input_gate, output_gate, candidate_cell = gate_weights.chunk(3, dim=1)
    input_gate = torch.sigmoid(input_gate)
    output_gate = torch.sigmoid(output_gate)
    candidate_cell = F.elu(candidate_cell, alpha=1.0)
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


class LLTMFunction(torch.autograd.Function):
    """The LLTM cell with its forward and backward in C++ (the wb_lltm extension)."""

    @staticmethod
    def forward(ctx, input, weights, bias, old_h, old_cell):
        ext = _extension or load_extension()
        new_h, new_cell, gates, X = ext.forward(input, weights, bias, old_h, old_cell)
        # Everything the C++ backward reads; the intermediates are saved, and only tanh(new_cell) is recomputed.
        ctx.save_for_backward(new_cell, gates, X, weights)
        return new_h, new_cell

    @staticmethod
    @torch.autograd.function.once_differentiable  # the C++ backward builds no graph of its own
    def backward(ctx, grad_h, grad_cell):
        ext = _extension or load_extension()
        d_old_h, d_input, d_weights, d_bias, d_old_cell = ext.backward(grad_h, grad_cell, *ctx.saved_tensors)
        # One gradient per argument of forward, in the same order.
        return d_input, d_weights, d_bias, d_old_h, d_old_cell


def lltm_cpp(input, weights, bias, old_h, old_cell):
    """The LLTM cell through the C++ extension; differentiable via LLTMFunction."""
    return LLTMFunction.apply(input, weights, bias, old_h, old_cell)


def lltm_op(input, weights, bias, old_h, old_cell):
    """The LLTM cell as one call of the op torch.ops.wb_lltm.lltm_forward -> (new_h, new_cell).

    Differentiable (the autograd formula registered on the op calls lltm_backward) and
    torch.compile/torch.export-friendly (fake kernels). Call load_extension() once before compiling.
    """
    if _extension is None:
        load_extension()
    new_h, new_cell, _, _ = torch.ops.wb_lltm.lltm_forward(input, weights, bias, old_h, old_cell)
    return new_h, new_cell


class _LLTMBase(nn.Module):
    def __init__(self, input_features: int, state_size: int):
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = nn.Parameter(torch.empty(3 * state_size))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.state_size)
        with torch.no_grad():
            self.weights.uniform_(-bound, bound)
            self.bias.uniform_(-bound, bound)

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"

    def forward(self, input, state):
        old_h, old_cell = state
        return self._cell(input, self.weights, self.bias, old_h, old_cell)


class LLTMPython(_LLTMBase):
    """LLTM cell module computed by `lltm_python`."""

    _cell = staticmethod(lltm_python)


class LLTMCpp(_LLTMBase):
    """LLTM cell module computed by the C++ extension (`lltm_cpp`)."""

    _cell = staticmethod(lltm_cpp)


__all__ = [
    "EXTENSION_NAME",
    "load_extension",
    "ops_library",
    "register_python_kernels",
    "make_inputs",
    "lltm_python",
    "lltm_cpp",
    "lltm_op",
    "LLTMFunction",
    "LLTMPython",
    "LLTMCpp",
    "cuda_source_paths",
]
