"""Checking a refused kernel: its first launch raises ``xsim.CompileError`` naming the test file and
the line marked ``# E:<marker>``, with the expected phrase."""

import inspect

import pytest

import xsim


def assert_refused(kernel, args, phrase: str, marker: str, dim: int = 1):
    lines, first = inspect.getsourcelines(kernel.pyfunc)
    line = first + next(n for n, s in enumerate(lines) if f"# E:{marker}" in s)
    with pytest.raises(xsim.CompileError) as info:
        xsim.launch(kernel, dim, inputs=args)
    err = info.value
    assert phrase in str(err)
    assert (err.file, err.line) == (inspect.getsourcefile(kernel.pyfunc), line), str(err)
