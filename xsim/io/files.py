"""The files a user names: inputs must be regular files (a FIFO would hang the reader, ``/dev/zero``
would be read forever), outputs are checked before a run and written atomically, never over an
input. Nothing the user had is lost: a failed or interrupted write leaves the old file in place."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..errors import SceneError

USD_SUFFIXES = (".usda", ".usdc", ".usd")
ANIMATION_SUFFIXES = (".gif", ".mp4")
PREVIEW_SUFFIXES = (".png", *ANIMATION_SUFFIXES)
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as a regular file ("does not exist", "is a symlink loop", "is a
    directory", "is not a regular file (a FIFO)"...), or None when it can."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:
        return "is a symlink loop" if e.errno == errno.ELOOP else f"cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(mode):
        return "is a directory"
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        return f"is not a regular file ({kind})"
    return None


def check_output(text: str | Path, option: str, suffixes: Sequence[str], inputs: Sequence[Path] = ()) -> Path:
    """The output path ``text`` given by ``option`` (``--out``, ``output.usd``...), checked before a
    run: not empty, ending in one of ``suffixes``, not a directory, its folder not a file, and none
    of ``inputs`` (the scene file). Raises ``xsim.SceneError`` naming the option."""
    endings = ", ".join(suffixes)

    def refuse(expected: str, found: str):
        raise SceneError(f"{option}: expected {expected}, found {found}")

    if str(text) == "":
        refuse(f"a file path ending in {endings}", "an empty path")
    path = Path(text)
    if path.suffix not in suffixes:
        refuse(f"a file path ending in {endings}", f'"{path}"')
    if path.is_dir():
        refuse(f"a file path ending in {endings}", f'"{path}", which is a directory')
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        refuse("a path whose folders are folders", f'"{path}", but {folder} is a file')
    for other in inputs:
        if _same_file(path, Path(other)):
            refuse(f"a path other than the input file {other}",
                   f'"{path}" (writing it would destroy the input)')
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


_staged = threading.local()


@contextmanager
def all_or_nothing() -> Iterator[None]:
    """Hold back the renames of every :func:`write_atomically` in this block (this thread) until
    the block ends without error: a run that writes a USD file and a preview replaces either old
    file only once both are complete, and a failure or Ctrl-C anywhere leaves every old file."""
    if getattr(_staged, "pending", None) is not None:
        yield  # inside another such block: its end renames these files too
        return
    pending: list[tuple[Path, Path]] = []
    _staged.pending = pending
    try:
        yield
        for tmp, path in pending:
            _replace(tmp, path)
    finally:
        _staged.pending = None
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)


def _replace(tmp: Path, path: Path):
    try:
        os.replace(tmp, path)
    except OSError as e:
        raise OSError(f"cannot write {path}: {e.strerror or e}") from None


def write_atomically(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Make ``path``'s folder, call ``write(tmp)`` for a temporary file beside ``path`` (same
    suffix), then rename it over ``path`` (at the end of an enclosing :func:`all_or_nothing`): a
    failed or interrupted write leaves the old file and no temporary. An ``OSError`` names
    ``path``, not the temporary."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot write {path}: cannot make its folder {path.parent} "
                      f"({e.strerror or e})") from None
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp{path.suffix}")
    pending = getattr(_staged, "pending", None)
    try:
        write(tmp)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if pending is not None:
        pending.append((tmp, path))
        return path
    try:
        _replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
