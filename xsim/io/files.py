"""The files a user names: inputs must be regular files (a FIFO would hang the reader, ``/dev/zero``
would be read forever), outputs are checked before a run and written atomically, never over an
input. Nothing the user had is lost: a failed or interrupted write leaves the old file in place."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Sequence
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


def write_atomically(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Make ``path``'s folder, call ``write(tmp)`` for a temporary file beside ``path`` (same
    suffix), then rename it over ``path``: a failed or interrupted write leaves the old file and no
    temporary. An ``OSError`` names ``path``, not the temporary."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot write {path}: cannot make its folder {path.parent} "
                      f"({e.strerror or e})") from None
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise OSError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path
