"""Fresh namespaces: how every chapter loads code that registers operators or classes more than once per process.

An operator or a class can be registered only once per process, and registering it again does not
raise an exception Python could catch: the process aborts. Code loaded under one fixed name could
therefore not be replaced by a corrected version without restarting the kernel. So every chapter
that registers code a learner may edit and run again takes its namespace from here:

* C++ source (`ops`, `classes`, `load`): the word NAMESPACE in the source becomes
  `<stem>_<first 10 hex digits of the source's SHA-256>` (`for_source`), so every edit loads into a
  namespace of its own (and builds in a folder of its own), while re-running an unchanged source reuses
  what is loaded;
* operators defined in Python (`torch.library.custom_op`, `torch.library.Library`): `numbered(stem)`
  gives `<stem>_<n>`, a new namespace for each definition.

    blur_ops = fresh_namespace.ops("wb_ch06_blur", source, opencv=True)   # torch.ops.wb_ch06_blur_<hash>
    classes = fresh_namespace.classes("wb_ch07_recent", source)           # torch.classes.wb_ch07_recent_<hash>

A class the source registers must have internal linkage (an anonymous namespace): the class registry
tells classes apart by their C++ type, and two versions of `class RecentStrings` at namespace scope
are one type to it, so loading the second would abort the process all the same.
"""

from __future__ import annotations

import hashlib
import itertools

from workbook.build import SOURCES_DIR, write_if_changed
from workbook.build import load as build_load
from workbook.build import opencv as opencv_paths

_loaded: set[str] = set()
_numbers = itertools.count()


def for_source(stem: str, source: str) -> str:
    """`<stem>_<hash of source>`: one namespace per version of a source."""
    return f"{stem}_{hashlib.sha256(source.encode()).hexdigest()[:10]}"


def numbered(stem: str) -> str:
    """`<stem>_<n>`, never the same twice in a process: for operators defined in Python."""
    return f"{stem}_{next(_numbers)}"


def load_library(name: str, path, *, opencv: bool = False, **options) -> str:
    """Build the source `path` as a plain shared library `name` (linked with OpenCV if asked) and load it;
    `options` go to `workbook.build.load`. Returns the library's path."""
    if opencv:
        for key, values in opencv_paths.build_options().items():
            options[key] = [*options.get(key, []), *values]
    return build_load(name, [path], is_python_module=False, **options)


def write(stem: str, source: str, *, rewrite=None, folder=SOURCES_DIR, suffix: str = ".cpp"):
    """Write `source` with NAMESPACE replaced by `for_source(stem, source)` to `folder`/<stem>/<namespace><suffix>
    (only if changed); returns (namespace, path). `rewrite(text, namespace)`, when given, turns the text into
    what is written (chapter 05's CPU emulation of CUDA does)."""
    if "NAMESPACE" not in source:
        raise ValueError(
            "the source must register its operators or classes under the word NAMESPACE, "
            "e.g. TORCH_LIBRARY(NAMESPACE, m)"
        )
    namespace = for_source(stem, source)
    text = source.replace("NAMESPACE", namespace)
    if rewrite is not None:
        text = rewrite(text, namespace)
    return namespace, write_if_changed(folder / stem / f"{namespace}{suffix}", text)


def load(stem: str, source: str, *, opencv: bool = False, rewrite=None, folder=SOURCES_DIR, suffix=".cpp", **options):
    """Build (once) and load what `write` writes; return the namespace. The code is built with -O2 unless
    `extra_cflags` says otherwise; `options` go to `workbook.build.load`."""
    namespace = for_source(stem, source)
    if namespace not in _loaded:
        _, path = write(stem, source, rewrite=rewrite, folder=folder, suffix=suffix)
        options.setdefault("extra_cflags", ["-O2"])
        load_library(namespace, path, opencv=opencv, **options)
        _loaded.add(namespace)
    return namespace


def is_loaded(namespace: str) -> bool:
    return namespace in _loaded


def mark_loaded(namespaces) -> None:
    """Record namespaces that a library built another way (several sources in one) registered."""
    _loaded.update(namespaces)


def ops(stem: str, source: str, **options):
    """`torch.ops.<namespace>` of the loaded source (see `load`)."""
    import torch

    return getattr(torch.ops, load(stem, source, **options))


def classes(stem: str, source: str, **options):
    """`torch.classes.<namespace>` of the loaded source (see `load`)."""
    import torch

    return getattr(torch.classes, load(stem, source, **options))
