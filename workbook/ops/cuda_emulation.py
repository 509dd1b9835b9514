"""CUDA kernels run on the CPU, one thread at a time (no GPU, no nvcc needed).

    from workbook.ops import cuda_emulation
    ops = cuda_emulation.load_source("wb_ch05_emu", cuda_source)   # torch.ops.<wb_ch05_emu_<hash>>
    scatter.load()  # the ops' schemas are copied from the real library
    cuda_emulation.load_topic("scatter", ["checks.cpp", "cuda/scatter_cuda.cu"], ops=scatter.OP_NAMES)  # torch.ops.wb_scatter_emu

A `.cu` source is rewritten and compiled as plain C++: every launch `k<<<grid, block, shared, stream>>>(args)`
becomes `wb_emulation::launch(...)`, which calls the kernel for each (block, thread) in turn; the CUDA
key of its registrations becomes the CPU key, `.is_cuda()` checks become `.is_cpu()`, and the stand-in
headers of csrc/cuda_emulation/include (streams, guards, atomics) come before torch's. This finds wrong
index arithmetic, grid sizes, tie rules and results, and refuses a launch that is not on the current stream
or whose launch check is missing; races cannot happen when threads run one after another, so it cannot find
them (csrc/cuda_emulation/README.md).
"""

from __future__ import annotations

import re

from workbook import CSRC_DIR, build
from workbook.build import fresh_namespace

EMULATION_INCLUDE = CSRC_DIR / "cuda_emulation" / "include"
EMULATION_SOURCES = build.SOURCES_DIR / "cuda_emulation"
_FLAGS = dict(
    extra_include_paths=[str(EMULATION_INCLUDE)],
    extra_cflags=["-O1", "-include", str(EMULATION_INCLUDE / "wb_cuda_emulation.h")],
)


def rewrite_launches(text: str) -> str:
    """`kernel<<<config>>>(args);` -> `::wb_emulation::launch(config, [&] { kernel(args); });`.

    The kernel expression must start its line (the style of the workbook's .cu files).
    """
    pieces, position = [], 0
    while (start := text.find("<<<", position)) >= 0:
        line_start = text.rfind("\n", 0, start) + 1
        indent = re.match(r"[ \t]*", text[line_start:]).group(0)
        kernel = text[line_start:start].strip()
        config_end = text.index(">>>(", start)
        config = text[start + 3 : config_end]
        depth, cursor = 1, config_end + 4
        while depth:
            depth += {"(": 1, ")": -1}.get(text[cursor], 0)
            cursor += 1
        arguments = text[config_end + 4 : cursor - 1]
        pieces.append(text[position:line_start])
        pieces.append(f"{indent}::wb_emulation::launch({config}, [&] {{ {kernel}({arguments}); }})")
        position = cursor
    pieces.append(text[position:])
    return "".join(pieces)


def for_the_cpu(text: str, namespace: str) -> str:
    """A CUDA source's registrations for namespace `namespace` moved to the CPU key, launches emulated."""
    text = re.sub(rf"TORCH_LIBRARY_IMPL\(\s*{namespace}\s*,\s*CUDA\s*,", f"TORCH_LIBRARY_IMPL({namespace}, CPU,", text)
    return rewrite_launches(text.replace(".is_cuda()", ".is_cpu()"))


def emulated_copy(topic: str, relative: str) -> str:
    """csrc/<topic>/<relative> rewritten for the emulation, under build/src/cuda_emulation/<topic>/."""
    text = (CSRC_DIR / topic / relative).read_text()
    name = f"wb_{topic}"
    # Every use of the name: the op namespace, the op names in strings, and the C++ namespace too, so
    # that no symbol of this build (a template's function-local static, say) can merge with the
    # original build's loaded in the same process.
    text = re.sub(rf"\b{name}\b", f"{name}_emu", text)
    if relative.endswith(".cu"):
        if f"TORCH_LIBRARY_IMPL({name}_emu, CUDA, m)" not in text:
            raise ValueError(f"csrc/{topic}/{relative} has no TORCH_LIBRARY_IMPL({name}, CUDA, m) block")
        text = for_the_cpu(text, f"{name}_emu")
        relative = relative[: -len(".cu")] + ".cpp"
    return str(build.write_if_changed(EMULATION_SOURCES / topic / relative, text))


# The Python definitions of each emulated namespace's ops (a Library's definitions last as long as it does).
_DEFINITIONS = {}


def define_like(namespace: str, ops) -> None:
    """Define the ops `ops` of the loaded library `namespace` again, every overload with the same schema,
    in the namespace `<namespace>_emu`. The emulated build then needs no TORCH_LIBRARY block of its own:
    it compiles the .cu file and what it calls, not the schema's file (and the autograd code beside it)."""
    import torch

    emulated = f"{namespace}_emu"
    ops = tuple(ops)
    if emulated in _DEFINITIONS:
        defined, _ = _DEFINITIONS[emulated]
        if defined != ops:
            raise ValueError(f"{emulated} already defines {list(defined)}; it cannot define {list(ops)} instead")
        return
    schemas = []
    for name in ops:
        packet = getattr(getattr(torch.ops, namespace), name, None)
        if packet is None:
            raise RuntimeError(
                f"{namespace}::{name} is not defined: load the {namespace} library before emulating its CUDA kernels"
            )
        schemas += [str(getattr(packet, overload)._schema).split("::", 1)[1] for overload in packet.overloads()]
    library = torch.library.Library(emulated, "DEF")
    for schema in schemas:
        library.define(schema)
    _DEFINITIONS[emulated] = (ops, library)


def load_topic(topic: str, sources, ops, **kwargs):
    """Build csrc/<topic>'s sources (the .cu ones emulated) as the library wb_<topic>_emu and load it.

    `ops`: the names of the ops the .cu file registers kernels for; they are defined in wb_<topic>_emu
    with the schemas of the loaded library wb_<topic> (`define_like`), so `sources` need not include
    the file with its TORCH_LIBRARY block.
    """
    define_like(f"wb_{topic}", ops)
    for header in (CSRC_DIR / topic).rglob("*.h"):  # every header the sources may include, rewritten too
        emulated_copy(topic, str(header.relative_to(CSRC_DIR / topic)))
    return build.load(f"wb_{topic}_emu", [emulated_copy(topic, source) for source in sources], **_FLAGS, **kwargs)


# Appended to a source built by load_source: `<namespace>.emulated_launches(like)` returns the launches made
# since the last call, flattened as [grid, block, checked, ...], and forgets them (see `launches`).
_LAUNCH_LOG_OP = r"""
#include <torch/library.h>
#include <vector>
TORCH_LIBRARY_FRAGMENT(NAMESPACE, m) {
  m.def("emulated_launches(Tensor like) -> int[]", [](const at::Tensor&) {
    std::vector<int64_t> flat;
    for (const auto& launch : ::wb_emulation::launches()) {
      flat.insert(flat.end(), {launch.grid, launch.block, launch.checked ? 1 : 0});
    }
    ::wb_emulation::launches().clear();
    return flat;
  });
}
"""


def launches(ops) -> list[tuple[int, int, bool]]:
    """The (grid, block, checked) of each launch a load_source build made since the last call, oldest first.

    `checked`: C10_CUDA_KERNEL_LAUNCH_CHECK() ran after the launch. A launch off the current stream never
    gets here: the emulated launch raises instead.
    """
    import torch

    flat = ops.emulated_launches(torch.empty(0))
    return [(flat[i], flat[i + 1], bool(flat[i + 2])) for i in range(0, len(flat), 3)]


def _emulated_text(source: str, namespace: str) -> str:
    return for_the_cpu(source.replace("NAMESPACE", namespace), namespace)


def _with_launch_log(text: str, namespace: str) -> str:
    return for_the_cpu(text, namespace) + _LAUNCH_LOG_OP.replace("NAMESPACE", namespace)


def load_source(stem: str, source: str):
    """Build a CUDA source whose registrations name NAMESPACE for the emulation; return torch.ops.<namespace>.

    Every version of the source gets its own namespace (`workbook.build.fresh_namespace`), so an edited
    source can be loaded into the process that loaded the old one. An unchanged one is loaded once and reused.
    """
    return fresh_namespace.ops(stem, source, rewrite=_with_launch_log, folder=EMULATION_SOURCES, **_FLAGS)


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.MULTILINE)


def load_sources(stem: str, sources) -> list:
    """Build several such sources in one library (one compile of torch's headers instead of one per
    source) and return their `torch.ops.<namespace>` objects; `load_source` then finds each one loaded.

    Each source keeps the namespace `load_source` gives it; its code goes into a C++ namespace of its own
    (its #include lines, gathered, come first), so that functions of the same name in two versions do not
    collide.
    """
    import torch

    sources = list(dict.fromkeys(sources))
    namespaces = [fresh_namespace.for_source(stem, source) for source in sources]
    missing = [(s, n) for s, n in zip(sources, namespaces) if not fresh_namespace.is_loaded(n)]
    if missing:
        includes, bodies = [], []
        for number, (source, namespace) in enumerate(missing):
            text = _emulated_text(source, namespace)
            includes += [line.strip() for line in _INCLUDE.findall(text)]
            body = _INCLUDE.sub("", text)
            bodies.append(f"namespace wb_version_{number} {{\n{body}\n}}  // namespace wb_version_{number}\n")
            bodies.append(_INCLUDE.sub("", _LAUNCH_LOG_OP.replace("NAMESPACE", namespace)))
        includes += [line.strip() for line in _INCLUDE.findall(_LAUNCH_LOG_OP)]
        text = "\n".join(dict.fromkeys(includes)) + "\n\n" + "\n".join(bodies)
        name = fresh_namespace.for_source(f"{stem}_set", text)
        path = build.write_if_changed(EMULATION_SOURCES / stem / f"{name}.cpp", text)
        build.load(name, [str(path)], is_python_module=False, **_FLAGS)
        fresh_namespace.mark_loaded(namespace for _, namespace in missing)
    return [getattr(torch.ops, namespace) for namespace in namespaces]
