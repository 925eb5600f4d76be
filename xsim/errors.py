"""Errors xsim raises for bad input, each naming the place it comes from."""

from __future__ import annotations

import sys
import warnings


class CompileError(Exception):
    """A kernel or func the compiler refuses: names file:line:col, shows the line with a caret, then the
    message (last, as Warp and Python's SyntaxError put it, so a pattern anchored at the end matches it)."""

    def __init__(self, message: str, file: str = "", line: int = 0, col: int = 0, source_line: str = ""):
        self.message, self.file, self.line, self.col, self.source_line = message, file, line, col, source_line
        text = f"{file}:{line}:{col + 1}: " if file else ""
        if source_line:
            stripped = source_line.rstrip("\n")
            indent = len(stripped) - len(stripped.lstrip())
            caret_col = max(col - indent, 0)
            text = f"{text.rstrip()}\n    {stripped.strip()}\n    {' ' * caret_col}^\n"
        super().__init__(text + message)


class WarpCodegenError(CompileError, RuntimeError):
    """A construct the kernel frontend refuses (Warp's name); the flavours below are also the Python
    error of their kind, so ``except TypeError`` catches a type mismatch in a kernel as in Warp."""

    __str__ = Exception.__str__  # not KeyError's quoting


class WarpCodegenTypeError(WarpCodegenError, TypeError):
    """A value of the wrong type: a mismatch, no overload for the argument types, a kernel returning."""


class WarpCodegenDtypeError(WarpCodegenTypeError):
    """An element type an operation has no implementation for (an atomic on int8), in Warp's words."""


class WarpCodegenAttributeError(WarpCodegenError, AttributeError):
    """An attribute, struct field or vector component that does not exist."""


class WarpCodegenIndexError(WarpCodegenError, IndexError):
    """A constant index out of a value's range."""


class WarpCodegenKeyError(WarpCodegenError, KeyError):
    """A name that is not defined where the kernel uses it."""


class WarpCodegenValueError(WarpCodegenError, ValueError):
    """A value of the right type that the construct cannot take (a zero range step)."""


class ArrayShapeError(ValueError, RuntimeError):
    """A shape an array cannot take (a reshape to another size): a ValueError, and the RuntimeError Warp
    raises there."""


class SceneError(Exception):
    """A malformed scene file: names the file, the key path, what was expected and what was found."""


class XsimRuntimeError(RuntimeError):
    """A failure while running a kernel (CUDA error, NaN check) naming the kernel or step."""


class NonFiniteError(XsimRuntimeError):
    """Check mode found NaN or inf: names the kernel (or solver step), the array and the index."""


def warn_to_stderr(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """A warning that filters can silence or raise, but that a warning recorder (pytest's) does not
    swallow: it is written to stderr as it is issued (Warp's logger writes its warnings so)."""

    def show(msg, category, filename, lineno, file=None, line=None):
        sys.stderr.write(f"xsim {category.__name__}: {msg}\n")

    with warnings.catch_warnings():
        warnings.showwarning = show
        warnings.warn(message, category, stacklevel=stacklevel + 1)


class AssetError(ValueError):
    """A robot or asset file (URDF, MJCF, USD) xsim cannot import: names the file, the element (its
    name or path in the file) and what was expected or is not supported."""


def missing_extra(feature: str, module: str, extra: str) -> ImportError:
    """The error for an optional package that is not installed: which feature needs it and which
    ``xsim[extra]`` brings it."""
    return ImportError(f"{feature} needs the package {module!r}, which is not installed: "
                       f"pip install 'xsim[{extra}]' (or pip install {module})")
