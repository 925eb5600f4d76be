"""A kernel may name xsim's builtins, library funcs and types without the module prefix (``vec3(...)``,
``length(v)``, ``expect_eq(a, b)``), as Warp's kernels may; any other unknown name is still refused."""

import numpy as np
import pytest

import xsim

# the bare names below are xsim's, found by the kernel compiler; this module never imports them
# ruff: noqa: F821


@xsim.kernel
def bare_library_names(out: xsim.array(dtype=float)):
    v = vec3(3.0, 4.0, 12.0)
    out[0] = length(v)
    out[1] = norm_l1(v)
    out[2] = sin(0.5) + float(len(v))
    expect_eq(v, vec3(3.0, 4.0, 12.0))


@xsim.kernel
def bare_unknown_name(out: xsim.array(dtype=float)):
    out[0] = no_such_builtin(1.0)


def test_builtins_funcs_and_types_resolve_without_the_module_prefix():
    out = xsim.zeros(3)
    xsim.launch(bare_library_names, 1, inputs=[out])
    np.testing.assert_allclose(out.numpy(), [13.0, 19.0, np.sin(0.5) + 3.0], rtol=1e-6)


def test_a_name_that_is_not_xsims_is_still_unknown():
    with pytest.raises(xsim.CompileError, match="unknown name 'no_such_builtin'"):
        xsim.launch(bare_unknown_name, 1, inputs=[xsim.zeros(1)])
