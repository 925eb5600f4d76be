"""Wrong launch arguments: ``TypeError``/``ValueError`` naming the kernel, the parameter, what was
expected and what was given; nothing runs, and the output is untouched."""

import os
import re

import numpy as np
import pytest

import xsim


@xsim.struct
class Params:
    gain: float


@xsim.kernel(module="xsim_tests_launch_errors")
def scaled_sum(a: float, n: int, x: xsim.array(dtype=float), v: xsim.array(dtype=xsim.vec3, ndim=2),
               p: Params, offset: xsim.vec3, out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = a * x[i] + float(n) + v[i, 0].x * p.gain + offset.y


def good_args():
    p = Params()
    p.gain = 2.0
    return {"a": 1.5, "n": 2, "x": xsim.full(4, 1.0, dtype=float), "v": xsim.ones((4, 1), dtype=xsim.vec3),
            "p": p, "offset": xsim.vec3(0.0, 0.25, 0.0), "out": xsim.zeros(4, dtype=float)}


def launch_with(dim=4, device=None, **changes):
    args = good_args() | changes
    values = list(args.values())
    xsim.launch(scaled_sum, dim, inputs=values[:-1], outputs=values[-1:], device=device)
    return args["out"]


def test_good_arguments_run():
    out = launch_with()
    np.testing.assert_allclose(out.numpy(), 1.5 + 2 + 2 + 0.25)


def expect(exc, *parts, **changes):
    out = xsim.zeros(4, dtype=float)
    with pytest.raises(exc) as info:
        launch_with(out=out, **changes) if "out" not in changes else launch_with(**changes)
    msg = str(info.value)
    for p in parts:
        assert p in msg, msg
    np.testing.assert_array_equal(out.numpy(), 0)  # nothing ran
    return msg


def test_wrong_array_dtype_names_kernel_parameter_expected_and_given():
    expect(TypeError, "kernel 'scaled_sum' parameter 'x': expected array(dtype=float32, ndim=1), got "
                      "array(dtype=float64, ndim=1)", x=xsim.zeros(4, dtype=xsim.float64))


def test_wrong_vector_array_dtype():
    expect(TypeError, "kernel 'scaled_sum' parameter 'v': expected array(dtype=vec3f, ndim=2), got "
                      "array(dtype=vec3d, ndim=2)", v=xsim.zeros((4, 1), dtype=xsim.vec3d))


def test_wrong_array_ndim():
    expect(TypeError, "kernel 'scaled_sum' parameter 'v': expected array(dtype=vec3f, ndim=2), got "
                      "array(dtype=vec3f, ndim=1)", v=xsim.zeros(4, dtype=xsim.vec3))


@pytest.mark.cpu_only("checks a CPU array refused by a cuda:0 launch")
def test_wrong_device_names_both_devices():
    # a Device object that describes a GPU; nothing is allocated on it, so no GPU is needed
    gpu = xsim.Device("cuda:0", 0)
    expect(ValueError, "kernel 'scaled_sum' parameter 'x': array is on device 'cpu' but the launch runs on "
                       "'cuda:0'", device=gpu)


@pytest.mark.cpu_only("names both devices itself")
def test_numpy_array_in_a_gpu_launch_names_the_device_mismatch():
    # host memory is a CPU array: the error is the device mismatch, not a layout or copy problem
    gpu = xsim.Device("cuda:0", 0)
    expect(ValueError, "kernel 'scaled_sum' parameter 'x': array is on device 'cpu' but the launch runs on "
                       "'cuda:0'", device=gpu, x=np.ones(4, np.float32))


@pytest.mark.skipif(not xsim.is_cuda_available(), reason="needs a CUDA GPU")
@pytest.mark.cuda
@pytest.mark.cpu_only("names both devices itself")
def test_gpu_array_in_a_cpu_launch_is_refused():
    expect(ValueError, "parameter 'x': array is on device 'cuda:0' but the launch runs on 'cpu'",
           x=xsim.zeros(4, dtype=float, device="cuda:0"), device="cpu")


@pytest.mark.skipif(xsim.is_cuda_available(), reason="this machine has a GPU")
@pytest.mark.cpu_only("checks the error on a machine without CUDA")
@pytest.mark.skipif(os.environ.get("XSIM_TEST_FAKE_CUDA") == "1", reason="the stand-in CUDA driver is installed")
def test_launch_on_a_missing_gpu_says_what_is_missing():
    with pytest.raises(RuntimeError) as info:
        launch_with(device="cuda:0")
    msg = str(info.value)
    assert msg.startswith("device 'cuda:0' needs CUDA, but ") and 'device="cpu"' in msg, msg


def test_too_few_arguments_lists_the_parameters():
    args = list(good_args().values())
    with pytest.raises(TypeError) as info:
        xsim.launch(scaled_sum, 4, inputs=args[:-2], outputs=args[-1:])
    assert str(info.value) == "kernel 'scaled_sum' takes 7 arguments (a, n, x, v, p, offset, out), got 6"


def test_too_many_arguments():
    args = list(good_args().values())
    with pytest.raises(TypeError, match=re.escape("kernel 'scaled_sum' takes 7 arguments (a, n, x, v, p, offset, "
                                                  "out), got 8")):
        xsim.launch(scaled_sum, 4, inputs=args, outputs=[xsim.zeros(4)])


def test_float_for_an_int_parameter():
    expect(TypeError, "kernel 'scaled_sum' parameter 'n': expected int32, got float 2.5", n=2.5)


def test_bool_for_a_float_parameter():
    expect(TypeError, "kernel 'scaled_sum' parameter 'a': expected float32, got bool True", a=True)


def test_string_for_a_float_parameter():
    expect(TypeError, "kernel 'scaled_sum' parameter 'a': expected float32, got str", a="1.5")


def test_array_for_a_scalar_parameter():
    expect(TypeError, "kernel 'scaled_sum' parameter 'a': expected float32, got array", a=xsim.zeros(1))


def test_none_for_an_array_parameter_the_kernel_reads():
    # Warp's null array: the launch runs bounds-checked, so the read is an IndexError, never a crash
    with pytest.raises(IndexError, match=r"kernel 'scaled_sum'.*index \(0,\) is out of bounds for array 'x' "
                                         r"with shape \(0,\)"):
        launch_with(x=None)


def test_wrong_struct_type():
    expect(TypeError, "kernel 'scaled_sum' parameter 'p': expected struct Params, got float", p=1.0)


def test_vector_parameter_with_the_wrong_number_of_components():
    expect(TypeError, "kernel 'scaled_sum' parameter 'offset': expected vec3f, got list [1.0, 2.0]", offset=[1.0, 2.0])


@pytest.mark.parametrize("dim", [-1, (2, -3), (1, 2, 3, 4, 5), (), 2.0, "4"])
def test_bad_dim_names_the_kernel_and_the_dim(dim):
    expect(ValueError, "launch of kernel 'scaled_sum': dim must be a non-negative int or a tuple of 1 to 4 of them, "
                       f"got {dim!r}", dim=dim)


def test_launching_something_that_is_not_a_kernel():
    with pytest.raises(TypeError, match="launch\\(\\) needs an @xsim.kernel"):
        xsim.launch(lambda: None, 1)


def test_calling_a_kernel_directly_points_to_launch():
    with pytest.raises(TypeError, match=re.escape("kernel 'scaled_sum' is run with xsim.launch(scaled_sum, dim, "
                                                  "inputs=[...])")):
        scaled_sum(1.0)


def test_numpy_output_of_another_dtype_is_refused_rather_than_copied():
    out = np.zeros(4)  # float64: a converted copy would silently drop the kernel's writes
    msg = expect(TypeError, "kernel 'scaled_sum' parameter 'out': got a numpy array of dtype float64",
                 "astype(numpy.float32)", out=out)
    assert "copy" in msg
    np.testing.assert_array_equal(out, 0)


@pytest.mark.cpu_only("a numpy output is written in place in host memory on the CPU only")
def test_numpy_output_of_the_right_dtype_is_written_in_place_even_when_strided():
    backing = np.zeros(8, np.float32)
    launch_with(out=backing[::2])
    np.testing.assert_allclose(backing[::2], 1.5 + 2 + 2 + 0.25)
    np.testing.assert_array_equal(backing[1::2], 0)
