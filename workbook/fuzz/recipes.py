"""A case's arguments, built from their recipes: tensors from specs (see the package docstring), plain
values as they are."""

from __future__ import annotations


def make_tensor(spec: dict):
    import torch

    dtype = getattr(torch, spec.get("dtype", "float32"))
    shape = list(spec["shape"])
    generator = torch.Generator().manual_seed(spec.get("seed", 0))
    if spec.get("values") is not None:
        x = torch.tensor(spec["values"], dtype=dtype).reshape(shape)
    elif dtype.is_complex:
        x = torch.randn(shape, generator=generator, dtype=torch.complex64).to(dtype)
    elif dtype.is_floating_point:
        x = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        x = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        low = 0 if dtype == torch.uint8 else -4
        x = torch.randint(low, 5, shape, generator=generator).to(dtype)
    if spec.get("special") and x.numel() and x.is_floating_point():
        x.view(-1)[0] = float(spec["special"])
    leaf = x
    if spec.get("grad"):
        leaf.requires_grad_()
        if not spec.get("leaf", True):  # e.g. an out= tensor, which the op writes in place
            x = x * 1
    x = with_layout(x, spec.get("layout", "contiguous"))
    x.fuzz_leaf = leaf  # what gradients are taken with respect to
    if spec.get("device", "cpu") != "cpu":
        x = x.to(spec["device"])
    return x


def with_layout(x, layout: str):
    """The values of x (a contiguous tensor) in another memory layout; differentiable."""
    import torch

    if layout == "contiguous" or x.dim() == 0:
        return x
    if layout == "transposed":
        return x.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":
        doubled = torch.stack([x, torch.zeros_like(x)], dim=-1)
        return doubled.flatten(-2)[..., ::2]
    if layout == "expanded":
        return x.narrow(0, 0, min(1, x.shape[0])).expand(x.shape)
    if layout == "overlap":  # each row starts one element after the previous one
        flat = x.flatten()
        if flat.numel() < sum(size - 1 for size in x.shape) + 1:
            return x
        return flat.as_strided(x.shape, [1] * x.dim())
    raise ValueError(f"unknown layout {layout!r}")


def make_value(recipe):
    """A tensor from a {"tensor": spec} recipe, a list of recipes as a list, anything else as it is."""
    if isinstance(recipe, dict) and "tensor" in recipe:
        return make_tensor(recipe["tensor"])
    if isinstance(recipe, list):
        return [make_value(item) for item in recipe]
    return recipe


def case_arguments(case, on_cpu=False):
    """The case's arguments, built; "alias:<name>" stands for the very tensor passed as <name>.
    on_cpu: every tensor on the CPU instead, for the references."""
    args = {name: make_value(_recipe_on_cpu(recipe) if on_cpu else recipe) for name, recipe in case["args"].items()}
    for name, value in args.items():
        if isinstance(value, str) and value.startswith("alias:"):
            args[name] = args[value[len("alias:") :]]
    return args


def _recipe_on_cpu(recipe):
    """The same recipe with every tensor on the CPU: the reference of a call on meta tensors."""
    if isinstance(recipe, dict) and "tensor" in recipe:
        return {"tensor": {**recipe["tensor"], "device": "cpu"}}
    if isinstance(recipe, list):
        return [_recipe_on_cpu(item) for item in recipe]
    return recipe
