"""The on-disk kernel cache: one entry per (module content, target, toolchain, flags, xsim version).

Entries are written under a temporary name and renamed into place, binaries last-but-one and the
metadata (with the binary's checksum) last, so a concurrent or interrupted build never leaves an
entry that loads; an entry that fails its checksum or its metadata parse is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from .. import __version__


def cache_dir() -> Path:
    """The per-user cache folder (``XSIM_CACHE_DIR`` overrides), created with mode 0700."""
    root = os.environ.get("XSIM_CACHE_DIR")
    path = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "xsim"
    if not path.is_dir():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)
    return path


@functools.cache
def runtime_hash() -> str:
    """A hash of everything in xsim that shapes generated code: compiler sources, native headers."""
    here = Path(__file__).parent
    h = hashlib.blake2b(digest_size=16)
    h.update(__version__.encode())
    for p in sorted(here.glob("*.py")):  # every compiler source: a new file cannot be missed
        h.update(p.read_bytes())
    for p in sorted((here / "native").glob("*.h")):
        h.update(p.read_bytes())
    return h.hexdigest()


def entry_key(module_name: str, content_hash: str, target_id: str, debug: bool) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in (content_hash, target_id, str(debug), runtime_hash()):
        h.update(part.encode())
        h.update(b"\0")
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in module_name)[-48:]
    return f"{safe}-{h.hexdigest()}"


def file_digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def lookup(key: str, suffix: str) -> tuple[Path, dict] | None:
    """The binary and metadata of a valid cache entry, or None (missing, partial or corrupt)."""
    d = cache_dir()
    meta_path, bin_path = d / f"{key}.json", d / f"{key}{suffix}"
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("digest") != file_digest(bin_path):
            return None
        return bin_path, meta
    except (OSError, ValueError):
        return None


def atomic_write(path: Path, data: bytes):
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    import tempfile  # only writers need it; a cache hit in a fresh process should not pay its import
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def store(key: str, suffix: str, binary_tmp: Path, meta: dict) -> Path:
    """Move a freshly built binary into the cache and write its metadata; returns its path."""
    d = cache_dir()
    bin_path = d / f"{key}{suffix}"
    digest = file_digest(binary_tmp)
    os.replace(binary_tmp, bin_path)
    atomic_write(d / f"{key}.json", json.dumps({**meta, "digest": digest}).encode())
    return bin_path
