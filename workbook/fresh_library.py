"""Build and load C++ whose registrations name NAMESPACE: a fresh namespace for every version of the source.

    blur_ops = fresh_library.ops("workbook_blur", source, opencv=True)   # torch.ops.workbook_blur_<hash>
    classes = fresh_library.classes("workbook_recent", source)           # torch.classes.workbook_recent_<hash>

An operator or a class can be registered only once per process, and registering it again does not
raise an exception Python could catch: the process aborts. A library loaded under one fixed name
therefore cannot be replaced by a corrected version without restarting the kernel. Here the word
NAMESPACE in the source becomes `<stem>_<first 10 hex digits of the source's SHA-256>`, so every
edit loads into a namespace of its own (and builds in a folder of its own), while re-running an
unchanged source reuses what is loaded. Chapter 03's `scatter.load_inline_ops` does the same.

A class the source registers must have internal linkage (an anonymous namespace): the class registry
tells classes apart by their C++ type, and two versions of `class RecentStrings` at namespace scope
are one type to it, so loading the second would abort the process all the same.
"""

from __future__ import annotations

import hashlib

from . import build

_loaded: set[str] = set()


def namespace_for(stem: str, source: str) -> str:
    return f"{stem}_{hashlib.sha256(source.encode()).hexdigest()[:10]}"


def load(stem: str, source: str, *, opencv: bool = False) -> str:
    """Build (once) and load the source with NAMESPACE replaced; return the namespace."""
    if "NAMESPACE" not in source:
        raise ValueError(
            "the source must register its operators or classes under the word NAMESPACE, "
            "e.g. TORCH_LIBRARY(NAMESPACE, m)"
        )
    namespace = namespace_for(stem, source)
    if namespace not in _loaded:
        from .torchscript import load_library

        path = build.write_if_changed(f"{stem}/{namespace}.cpp", source.replace("NAMESPACE", namespace))
        load_library(namespace, path, opencv=opencv)
        _loaded.add(namespace)
    return namespace


def ops(stem: str, source: str, *, opencv: bool = False):
    """`torch.ops.<namespace>` of the loaded source (see `load`)."""
    import torch

    return getattr(torch.ops, load(stem, source, opencv=opencv))


def classes(stem: str, source: str, *, opencv: bool = False):
    """`torch.classes.<namespace>` of the loaded source (see `load`)."""
    import torch

    return getattr(torch.classes, load(stem, source, opencv=opencv))
