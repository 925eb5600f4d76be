"""Python modules generated as source text (host-call kernels, test kernels made from tables), imported
from a file: the frontend reads a kernel's source, so the text must live in a file."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType


def load_source(src: str, stem: str) -> ModuleType:
    """Import ``src`` as the module ``xsim_generated_<stem>_<digest>``, from a file named by its content
    in a per-user temporary folder (written once, atomically, so concurrent processes share it)."""
    digest = hashlib.blake2b(src.encode(), digest_size=8).hexdigest()
    name = f"xsim_generated_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    folder = Path(tempfile.gettempdir()) / f"xsim-generated-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{stem}_{digest}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(src)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # annotations are resolved through the module's entry (from __future__ import)
    spec.loader.exec_module(mod)
    return mod
