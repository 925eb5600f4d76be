"""Errors xsim raises for bad input, each naming the place it comes from."""

from __future__ import annotations


class CompileError(Exception):
    """A kernel or func the compiler refuses: names file:line:col, shows the line with a caret."""

    def __init__(self, message: str, file: str = "", line: int = 0, col: int = 0, source_line: str = ""):
        self.message, self.file, self.line, self.col, self.source_line = message, file, line, col, source_line
        where = f"{file}:{line}:{col + 1}: " if file else ""
        text = f"{where}{message}"
        if source_line:
            stripped = source_line.rstrip("\n")
            indent = len(stripped) - len(stripped.lstrip())
            caret_col = max(col - indent, 0)
            text += f"\n    {stripped.strip()}\n    {' ' * caret_col}^"
        super().__init__(text)


class SceneError(Exception):
    """A malformed scene file: names the file, the key path, what was expected and what was found."""


class XsimRuntimeError(RuntimeError):
    """A failure while running a kernel (CUDA error, NaN check) naming the kernel or step."""


class NonFiniteError(XsimRuntimeError):
    """Check mode found NaN or inf: names the kernel (or solver step), the array and the index."""
