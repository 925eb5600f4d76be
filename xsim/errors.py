"""Errors xsim raises for bad input, each naming the place it comes from."""

from __future__ import annotations


class CompileError(Exception):
    """A kernel or func the compiler refuses: names file:line:col, shows the line with a caret."""

    message_last = False  # the source line before the message, so that the text ends with the message

    def __init__(self, message: str, file: str = "", line: int = 0, col: int = 0, source_line: str = ""):
        self.message, self.file, self.line, self.col, self.source_line = message, file, line, col, source_line
        where = f"{file}:{line}:{col + 1}: " if file else ""
        text = f"{where}{message}"
        if source_line and self.message_last:
            text = f"{where}in `{source_line.strip()}`: {message}"
        elif source_line:
            stripped = source_line.rstrip("\n")
            indent = len(stripped) - len(stripped.lstrip())
            caret_col = max(col - indent, 0)
            text += f"\n    {stripped.strip()}\n    {' ' * caret_col}^"
        super().__init__(text)


class WarpCodegenError(CompileError, RuntimeError):
    """A construct the kernel frontend refuses (Warp's name); the flavours below are also the Python
    error of their kind, so ``except TypeError`` catches a type mismatch in a kernel as in Warp."""

    __str__ = Exception.__str__  # not KeyError's quoting


class WarpCodegenTypeError(WarpCodegenError, TypeError):
    """A value of the wrong type: a mismatch, no overload for the argument types, a kernel returning."""


class WarpCodegenDtypeError(WarpCodegenTypeError):
    """An element type an operation has no implementation for, in Warp's words: the text ends with Warp's
    message (Warp's tests match it to the end), after the place and the source line."""

    message_last = True


class WarpCodegenAttributeError(WarpCodegenError, AttributeError):
    """An attribute, struct field or vector component that does not exist."""


class WarpCodegenIndexError(WarpCodegenError, IndexError):
    """A constant index out of a value's range."""


class WarpCodegenKeyError(WarpCodegenError, KeyError):
    """A name that is not defined where the kernel uses it."""


class WarpCodegenValueError(WarpCodegenError, ValueError):
    """A value of the right type that the construct cannot take (a zero range step)."""


class SceneError(Exception):
    """A malformed scene file: names the file, the key path, what was expected and what was found."""


class XsimRuntimeError(RuntimeError):
    """A failure while running a kernel (CUDA error, NaN check) naming the kernel or step."""


class NonFiniteError(XsimRuntimeError):
    """Check mode found NaN or inf: names the kernel (or solver step), the array and the index."""
