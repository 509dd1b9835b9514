"""Judging what a call did: results and gradients against a reference's, error messages against the
arguments a case broke. A difference raises Mismatch."""

from __future__ import annotations

import re


class Mismatch(AssertionError):
    pass


def tolerance(dtype) -> dict:
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 2e-2, "atol": 2e-2}
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-5}
    if dtype == torch.float64:
        return {"rtol": 1e-9, "atol": 1e-12}
    return {"rtol": 0, "atol": 0}


def assert_same(got, expected, what="result"):
    import torch

    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            raise Mismatch(f"{what}: expected {len(expected)} values, got {type(got).__name__} {got!r:.80}")
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{what}[{i}]")
        return
    if not isinstance(expected, torch.Tensor):
        if got != expected:
            raise Mismatch(f"{what}: expected {expected!r}, got {got!r}")
        return
    if not isinstance(got, torch.Tensor):
        raise Mismatch(f"{what}: expected a tensor, got {type(got).__name__}")
    for attribute in ("shape", "dtype", "device"):
        if getattr(got, attribute) != getattr(expected, attribute):
            raise Mismatch(f"{what}: {attribute} {getattr(got, attribute)}, expected {getattr(expected, attribute)}")
    if got.device.type == "meta":
        return
    try:
        torch.testing.assert_close(got.detach(), expected.detach(), equal_nan=True, **tolerance(got.dtype))
    except AssertionError as error:
        raise Mismatch(f"{what}: {str(error).strip().splitlines()[-3:]}") from None


def assert_same_gradients(got_outputs, expected_outputs, got_inputs, expected_inputs, names):
    """Gradients of sum(output * weight) with respect to each input, for the op and the reference."""
    import torch

    got_outputs, expected_outputs = _float_outputs(got_outputs), _float_outputs(expected_outputs)
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.dtype) for o in expected_outputs]

    def grads(outputs, inputs):
        terms = [(o * w.to(o.device)).sum() for o, w in zip(outputs, weights) if o.requires_grad]
        if not terms:
            return [None] * len(inputs)
        return torch.autograd.grad(sum(terms), inputs, allow_unused=True)

    for name, tensor, g, e in zip(
        names, got_inputs, grads(got_outputs, got_inputs), grads(expected_outputs, expected_inputs)
    ):
        if e is None:
            e = torch.zeros_like(expected_inputs[names.index(name)])
        if g is None and tensor.numel() == 0:
            continue  # an empty input: None is its (empty) gradient
        if g is None:
            raise Mismatch(f"gradient of {name}: None (no gradient reached it)")
        assert_same(g, e.to(g.dtype), f"gradient of {name}")


def _float_outputs(outputs):
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    return [o for o in outputs if o.is_floating_point()]


def meta_like(expected, got):
    """The reference moved to meta when the op ran on meta tensors (only shapes, dtypes and devices count)."""
    import torch

    first = got[0] if isinstance(got, (tuple, list)) and got else got
    if not isinstance(first, torch.Tensor) or first.device.type != "meta":
        return expected
    if isinstance(expected, (tuple, list)):
        return tuple(e.to("meta") for e in expected)
    return expected.to("meta")


def names_argument(message: str, names) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) for name in names)
