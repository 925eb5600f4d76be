"""The on-disk kernel cache: one entry per (module content, target, toolchain, flags, xsim version).

Entries are written under a temporary name and renamed into place, binaries last-but-one and the
metadata (with the binary's checksum) last, so a concurrent or interrupted build never leaves an
entry that loads; an entry that fails its checksum or its metadata parse is rebuilt.

Loading a binary runs its code, so xsim loads only what no one but the user could have written:
the folder (symlinks resolved) and every folder above it must be owned by the user or root and
not writable by group or others (a sticky folder like /tmp excepted), and each entry file must
be a plain file owned by the user and not writable by group or others. Anything else is refused
with a ``CacheSecurityError`` saying what is wrong and how to fix it, not worked around: a
silent fallback folder would hide a planted file and rebuild every module on each run.
Build folders that killed compiles left behind are removed once they are an hour old.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import time
from pathlib import Path

from ..errors import XsimRuntimeError
from ..version import __version__

STALE_BUILD_SECONDS = 3600  # a build folder untouched this long belongs to a killed compile


class CacheSecurityError(XsimRuntimeError):
    """The kernel cache folder or an entry in it could have been written by someone else."""


def cache_dir() -> Path:
    """The per-user cache folder (``XSIM_CACHE_DIR`` overrides), created with mode 0700 and checked
    to be private (see the module docstring)."""
    root = os.environ.get("XSIM_CACHE_DIR")
    path = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "xsim"
    if not path.is_dir():
        missing = [path, *(p for p in path.parents if not p.exists())]
        for p in reversed(missing):  # every folder xsim creates is private, whatever the umask
            try:
                p.mkdir(mode=0o700)
            except FileExistsError:  # another process made it first
                continue
            os.chmod(p, 0o700)
    _check_folder(path)
    return path


def _check_folder(path: Path) -> None:
    """Refuse a cache folder that another user could write into, replace or redirect."""
    real = Path(os.path.realpath(path))
    via = f" (reached through the symlink {path})" if real != path.absolute() else ""
    st = os.stat(real)
    me = os.geteuid()
    if st.st_uid != me:
        raise CacheSecurityError(f"the kernel cache folder {real}{via} belongs to user id {st.st_uid}, not you "
                                 f"(user id {me}), so xsim will not load code from it; point XSIM_CACHE_DIR at a "
                                 "folder of your own")
    if st.st_mode & 0o022:
        raise CacheSecurityError(f"the kernel cache folder {real}{via} is writable by other users (mode "
                                 f"{stat.S_IMODE(st.st_mode):o}), so xsim will not load code from it; run "
                                 f"`chmod 700 {real}` or point XSIM_CACHE_DIR at a private folder")
    for parent in real.parents:
        pst = os.stat(parent)
        if pst.st_uid not in (me, 0) or (pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX):
            raise CacheSecurityError(f"the kernel cache folder {real}{via} lies in {parent}, which other users "
                                     f"can change (owner id {pst.st_uid}, mode {stat.S_IMODE(pst.st_mode):o}), so "
                                     "they could swap the cache for their own; point XSIM_CACHE_DIR at a folder "
                                     "under your home directory")


def _check_entry(path: Path) -> None:
    """Refuse an entry file that is not a plain file the user alone can write."""
    st = os.lstat(path)
    me = os.geteuid()
    if not stat.S_ISREG(st.st_mode) or st.st_uid != me or st.st_mode & 0o022:
        kind = "a plain file" if stat.S_ISREG(st.st_mode) else "not a plain file"
        raise CacheSecurityError(f"the kernel cache entry {path} is {kind} owned by user id {st.st_uid} with mode "
                                 f"{stat.S_IMODE(st.st_mode):o}, which someone other than you (user id {me}) could "
                                 f"have written, so xsim will not load it; delete it (`rm {path}`) and xsim "
                                 "rebuilds it")


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
        _check_entry(meta_path)
        _check_entry(bin_path)
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
    os.chmod(binary_tmp, 0o700)  # whatever the umask: the loader refuses group/world-writable entries
    digest = file_digest(binary_tmp)
    os.replace(binary_tmp, bin_path)
    atomic_write(d / f"{key}.json", json.dumps({**meta, "digest": digest}).encode())
    return bin_path


@contextlib.contextmanager
def build_lock(key: str):
    """Hold the build of entry ``key`` against every other process using this cache folder: the holder
    builds, the others wait and then find the entry (look it up again once the lock is held). Without it,
    two processes that miss at once (test workers, Ray workers, two scripts) each compile the same module,
    and a large module's compile takes minutes and gigabytes. An advisory ``flock`` on ``<key>.lock``,
    released when the holder exits or dies; where ``fcntl`` is missing (Windows) each builds its own."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return
    fd = os.open(cache_dir() / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def remove_stale_builds(now: float | None = None) -> list[Path]:
    """Delete build folders and temporary files of compiles that were killed (untouched for
    ``STALE_BUILD_SECONDS``); a build in progress keeps writing into its folder and is left alone.
    Returns what was removed."""
    import shutil  # only a compile calls this
    d = cache_dir()
    cutoff = (time.time() if now is None else now) - STALE_BUILD_SECONDS
    removed = []
    for p in d.iterdir():
        if not (p.name.startswith("build-") or p.name.endswith(".tmp")):
            continue
        try:
            st = os.lstat(p)
            newest = st.st_mtime
            if stat.S_ISDIR(st.st_mode):
                newest = max([newest, *(os.lstat(c).st_mtime for c in p.iterdir())])
            if newest >= cutoff or st.st_uid != os.geteuid():
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p)
        except OSError:  # another process removed or is finishing it
            continue
    return removed


def clear_kernel_cache() -> list[Path]:
    """Warp's ``clear_kernel_cache``: delete the compiled modules in the on-disk cache and forget those
    loaded in this process, so that each module compiles again at its next launch. Builds in progress
    (their ``build-`` folders) are left alone. Every entry goes: xsim's versions share the folder, and a
    key names its version only through a hash. Returns the files removed."""
    from .module import _EVERY_MODULE
    for m in list(_EVERY_MODULE):
        m.builds.clear()
    removed = []
    for p in cache_dir().iterdir():
        if p.name.startswith("build-") or not p.is_file() or p.suffix not in (".json", ".so", ".gch", ".cubin", ".ptx"):
            continue
        try:
            p.unlink()
        except FileNotFoundError:  # another process cleared it first
            continue
        removed.append(p)
    return removed
