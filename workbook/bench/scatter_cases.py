"""The scatter ops against the faster of their native equivalents, over sizes, group counts and layouts.

A case is (elements, groups, index order, layout, dtype); every case times our four ops, torch's
native equivalents and a copy of as many bytes as scatter_sum moves, all side by side:

    sum   index_add_, scatter_add_, scatter_reduce_("sum", include_self=False)
    mean  scatter_reduce_("mean", include_self=False)
    max   scatter_reduce_("amax", include_self=False)  (ours also returns the argmax)
    min   scatter_reduce_("amin", include_self=False)  (ours also returns the argmin)

Layouts: "1-D" (one value per index entry) and "[N, 64]" (64 features per index entry, reduced along
dim 0). A case with more groups than index entries is left out. Bytes moved by an op: src and the
index (as passed) read, the output (and for min/max the int64 arg output) written.
"""

from __future__ import annotations

import itertools

import torch

from workbook.bench.timing import Settings, side_by_side, us

OPS = ("sum", "mean", "max", "min")
NATIVES = {
    "sum": {
        "index_add_": "torch.zeros(shape, dtype=dtype).index_add_(0, index, src)",
        "scatter_add_": "torch.zeros(shape, dtype=dtype).scatter_add_(0, expanded, src)",
        "scatter_reduce_ sum": "torch.zeros(shape, dtype=dtype).scatter_reduce_(0, expanded, src, 'sum', include_self=False)",
    },
    "mean": {
        "scatter_reduce_ mean": "torch.zeros(shape, dtype=dtype).scatter_reduce_(0, expanded, src, 'mean', include_self=False)"
    },
    "max": {
        "scatter_reduce_ amax": "torch.zeros(shape, dtype=dtype).scatter_reduce_(0, expanded, src, 'amax', include_self=False)"
    },
    "min": {
        "scatter_reduce_ amin": "torch.zeros(shape, dtype=dtype).scatter_reduce_(0, expanded, src, 'amin', include_self=False)"
    },
}
LAYOUTS = {"1-D": 1, "[N, 64]": 64}  # features per index entry
INDEX_ORDERS = ("random", "sorted")
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def cases(elements, groups):
    """(elements, groups, index order, layout, dtype name) for every combination that makes sense."""
    for n, g, order, layout, dtype in itertools.product(elements, groups, INDEX_ORDERS, LAYOUTS, DTYPES):
        if g <= n // LAYOUTS[layout]:
            yield n, g, order, layout, dtype


def make_inputs(n: int, groups: int, order: str, layout: str, dtype: str, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    features = LAYOUTS[layout]
    rows = n // features
    index = torch.randint(0, groups, (rows,), generator=generator)
    if order == "sorted":
        index = index.sort().values
    shape = (rows,) if features == 1 else (rows, features)
    src = torch.randn(shape, generator=generator, dtype=DTYPES[dtype])
    return src, index


def time_case(n, groups, order, layout, dtype, settings: Settings) -> list[dict]:
    from workbook.ops import scatter

    src, index = make_inputs(n, groups, order, layout, dtype)
    expanded = scatter.broadcast(index, src, 0).contiguous()  # scatter_add_/scatter_reduce_ want src's shape
    shape = (groups, *src.shape[1:])
    out_bytes = torch.Size(shape).numel() * src.element_size()
    read_bytes = src.numel() * src.element_size() + index.numel() * index.element_size()
    sum_bytes = read_bytes + out_bytes
    # Written, not empty: reading never-written pages reads the kernel's zero page, which stays in cache
    # (a copy of 20 MB from an empty tensor ran 3x faster on 2 threads than one from written memory).
    copy_from = torch.ones(sum_bytes // 2, dtype=torch.uint8)
    copy_to = torch.zeros_like(copy_from)
    env = {
        "scatter": scatter,
        "src": src,
        "index": index,
        "expanded": expanded,
        "shape": shape,
        "dtype": DTYPES[dtype],
        "groups": groups,
        "torch": torch,
        "copy_from": copy_from,
        "copy_to": copy_to,
    }
    statements = {"copy": "copy_to.copy_(copy_from)"}
    for op in OPS:
        statements[f"ours {op}"] = f"scatter.scatter_{op}(src, index, 0, None, groups)"
        statements.update(NATIVES[op])
    times = side_by_side({name: (stmt, env) for name, stmt in statements.items()}, settings)
    copy_gbps = sum_bytes / times["copy"]["median_s"] / 1e9
    rows = []
    for op in OPS:
        ours = times[f"ours {op}"]["median_s"]
        natives = {name: times[name]["median_s"] for name in NATIVES[op]}
        best_native = min(natives, key=natives.get)
        moved = sum_bytes + (torch.Size(shape).numel() * 8 if op in ("max", "min") else 0)
        rows.append(
            {
                "op": op,
                "elements": n,
                "groups": groups,
                "index": order,
                "layout": layout,
                "dtype": dtype,
                "ours_s": ours,
                "natives_s": natives,
                "best_native": best_native,
                "ratio": natives[best_native] / ours,
                "ratio_fastest_blocks": times[best_native]["fastest_s"] / times[f"ours {op}"]["fastest_s"],
                "bytes": moved,
                "ours_gbps": moved / ours / 1e9,
                "copy_gbps": copy_gbps,
                "percent_of_copy": 100 * moved / ours / 1e9 / copy_gbps,
            }
        )
    return rows


def run(settings: Settings, elements, groups) -> list[dict]:
    print("scatter ops against the faster native equivalent (ratio = native / ours, > 1: ours faster)")
    print(
        f"  {'elements':>8} {'groups':>7} {'index':6} {'layout':7} {'dtype':7} {'op':4} {'ours':>13} "
        f"{'best native':>13}  {'(which)':20} {'ratio':>6}  {'GB/s':>6} {'% of copy':>9}"
    )
    rows = []
    for case in cases(elements, groups):
        for row in time_case(*case, settings):
            rows.append(row)
            print(
                f"  {row['elements']:8.0e} {row['groups']:7.0e} {row['index']:6} {row['layout']:7} {row['dtype']:7} "
                f"{row['op']:4} {us(row['ours_s'])} {us(row['natives_s'][row['best_native']])}  "
                f"{row['best_native']:20} {row['ratio']:5.2f}x  {row['ours_gbps']:6.1f} {row['percent_of_copy']:8.0f}%"
            )
    print("  GB/s: bytes moved (src and index read, outputs written) per second; % of copy: against a copy of")
    print("  scatter_sum's bytes into a preallocated buffer, timed in the same run.")
    return rows
