"""``kernel(grid_stride=...)`` (Warp 1.19's): a kernel's CUDA entry points either loop over the launch in grid
strides or run one index per thread. The choice is the kernel's own, else its module's ``default_grid_stride``
option, else ``xsim.config.default_grid_stride``, fixed with the kernel's code hash. Results are the same
either way (checked against numpy on the CPU); the CUDA source of each form compiles with NVRTC."""

import numpy as np
import pytest

import xsim

F64 = xsim.array(dtype=xsim.float64)


def _scaled(grid_stride):
    @xsim.kernel(module="unique", grid_stride=grid_stride)
    def scaled(x: F64, y: F64):
        i = xsim.tid()
        y[i] = 3.0 * x[i] * x[i]
    return scaled


@pytest.fixture
def default_grid_stride():
    saved = xsim.config.default_grid_stride
    yield
    xsim.config.default_grid_stride = saved


def test_each_choice_gives_the_same_values_and_gradients():
    x = np.linspace(-1.0, 2.0, 37)
    for choice in (True, False):
        k = _scaled(choice)
        assert k.grid_stride is choice
        xa = xsim.array(x, dtype=xsim.float64, requires_grad=True)
        ya = xsim.zeros(len(x), dtype=xsim.float64, requires_grad=True)
        with xsim.Tape() as tape:
            xsim.launch(k, len(x), inputs=[xa, ya])
        tape.backward(grads={ya: xsim.ones(len(x), dtype=xsim.float64)})
        np.testing.assert_allclose(ya.numpy(), 3.0 * x * x, rtol=1e-15)
        np.testing.assert_allclose(xa.grad.numpy(), 6.0 * x, rtol=1e-15)


def test_a_kernel_without_a_choice_takes_the_default_when_hashed_and_keeps_it(default_grid_stride):
    xsim.config.default_grid_stride = False
    lean = _scaled(None)
    lean.module.get_module_hash()
    xsim.config.default_grid_stride = True
    assert lean.grid_stride is False and _scaled(None).grid_stride is True
    assert _scaled(False).grid_stride is False and lean.code_hash() != _scaled(True).code_hash()


def test_the_module_option_comes_before_the_config(default_grid_stride):
    name = "test_grid_stride_module_option"
    xsim.set_module_options({"default_grid_stride": False}, name)

    def body(y: F64):
        y[xsim.tid()] = 1.0
    try:
        assert xsim.kernel(body, module=name).grid_stride is False
        assert xsim.kernel(body, module=name, grid_stride=True).grid_stride is True
    finally:
        xsim.set_module_options({"default_grid_stride": None}, name)
    with pytest.raises(ValueError, match="default_grid_stride must be a bool or None"):
        xsim.set_module_options({"default_grid_stride": 1}, name)


def test_a_lean_kernel_refuses_a_capped_grid():
    y = xsim.zeros(4, dtype=xsim.float64)
    with pytest.raises(ValueError, match=r"kernel 'scaled' has grid_stride=False .* max_blocks=2"):
        xsim.launch(_scaled(False), 4, inputs=[y, y], max_blocks=2)
    xsim.launch(_scaled(True), 4, inputs=[y, y], max_blocks=2)


@pytest.mark.parametrize("debug", [False, True])
def test_the_cuda_entry_points_loop_or_not_and_compile(debug):
    for choice in (True, False):
        k = _scaled(choice)
        source, _ = k.module.generate("cuda", debug)
        assert ("t += (int64_t)gridDim.x * blockDim.x" in source) is choice
        assert ("if (t < n) {" in source) is not choice
        pytest.importorskip("cuda.bindings.nvrtc")
        from xsim.kernels import cuda
        assert cuda.compile_cubin(source, 80, f"grid_stride_{choice}_{debug}.cu", fast=True)
