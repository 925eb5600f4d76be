"""Arrays whose elements are structs holding arrays: kernels read and write the arrays an element refers
to (``holders[i].values[j]``), forward against numpy and gradients against float64 central differences.
Each array an element refers to carries its own gradient, whether or not the outer array has one (as Warp's
array views carry their grad pointers); what the adjoint cannot do right is refused, naming the line."""

import gc

import numpy as np
import pytest

import xsim

F = xsim.float64
RNG = np.random.default_rng(14)


@xsim.struct
class Holder:
    values: xsim.array(dtype=F)
    weight: F


@xsim.struct
class Outer:
    inner: Holder
    offsets: xsim.array(dtype=xsim.vec2d)


@xsim.kernel
def weighted_sines(holders: xsim.array(dtype=Holder), picks: xsim.array(dtype=int), loss: xsim.array(dtype=F)):
    i = xsim.tid()
    h = holders[i]
    xsim.atomic_add(loss, 0, h.weight * xsim.sin(h.values[picks[i]]) * h.values[0])


@xsim.kernel
def scatter_squares(holders: xsim.array(dtype=Holder), src: xsim.array(dtype=F)):
    i = xsim.tid()
    holders[i].values[1] = src[i] * src[i]


@xsim.kernel
def sum_of_cubes(x: xsim.array(dtype=F), loss: xsim.array(dtype=F)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, x[i] * x[i] * x[i])


@xsim.kernel
def nested_component_write(outers: xsim.array(dtype=Outer), src: xsim.array(dtype=F)):
    i = xsim.tid()
    outers[i].offsets[0].y = 3.0 * src[i]
    outers[i].inner.values[0] = outers[i].inner.weight * src[i]


@xsim.kernel
def doubles_in_place(holders: xsim.array(dtype=Holder)):
    i = xsim.tid()
    holders[i].values[0] = 2.0 * holders[i].values[0]


@xsim.struct
class Scene:
    holders: xsim.array(dtype=Holder)
    gain: F


@xsim.kernel
def through_a_struct_parameter(scene: Scene, loss: xsim.array(dtype=F)):
    i = xsim.tid()
    v = scene.holders[i].values
    xsim.atomic_add(loss, 0, scene.gain * v[1] * v[1] * v[0])


def central_differences(loss, host, h=1e-6) -> np.ndarray:
    """d loss / d host by central differences in float64, perturbing ``host`` (an array's memory) in place."""
    out = np.zeros(host.shape)
    for k in np.ndindex(host.shape):
        keep = host[k]
        host[k] = keep + h
        up = loss()
        host[k] = keep - h
        down = loss()
        host[k] = keep
        out[k] = (up - down) / (2 * h)
    return out


def make_holders(requires_grad: bool):
    a = xsim.array(RNG.uniform(-1, 1, 4), dtype=F, requires_grad=True)
    b = xsim.array(RNG.uniform(-1, 1, 3), dtype=F, requires_grad=True)
    # the first and the last element refer to one array: its gradient gets both contributions
    elems = [Holder(values=a, weight=1.5), Holder(values=b, weight=-0.5), Holder(values=a, weight=2.0)]
    return a, b, xsim.array(elems, dtype=Holder, requires_grad=requires_grad)


@pytest.mark.parametrize("outer_grad", [False, True])
def test_reads_through_elements_differentiate_into_each_referred_arrays_grad(outer_grad):
    a, b, holders = make_holders(outer_grad)
    picks = xsim.array([3, 2, 1], dtype=int)

    def loss_value():
        loss = xsim.zeros(1, dtype=F)
        xsim.launch(weighted_sines, 3, inputs=[holders, picks, loss])
        return float(loss.numpy()[0])

    va, vb = a.numpy(), b.numpy()
    expected = 1.5 * np.sin(va[3]) * va[0] - 0.5 * np.sin(vb[2]) * vb[0] + 2.0 * np.sin(va[1]) * va[0]
    assert loss_value() == pytest.approx(expected, rel=1e-12)

    loss = xsim.zeros(1, dtype=F, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(weighted_sines, 3, inputs=[holders, picks, loss])
    tape.backward(loss=loss)
    np.testing.assert_allclose(a.grad.numpy(), central_differences(loss_value, a.numpy()), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(b.grad.numpy(), central_differences(loss_value, b.numpy()), rtol=1e-7, atol=1e-9)
    if outer_grad:  # the struct's own number field has its gradient in the outer array's
        np.testing.assert_allclose(holders.grad.numpy()["weight"],
                                   central_differences(loss_value, holders.numpy()["weight"]), rtol=1e-7)
    else:
        assert holders.grad is None


def test_an_array_of_such_structs_inside_a_struct_parameter_differentiates_the_same():
    a, b, holders = make_holders(False)
    scene = Scene(holders=holders, gain=0.75)

    def loss_value():
        loss = xsim.zeros(1, dtype=F)
        xsim.launch(through_a_struct_parameter, 3, inputs=[scene, loss])
        return float(loss.numpy()[0])

    loss = xsim.zeros(1, dtype=F, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(through_a_struct_parameter, 3, inputs=[scene, loss])
    va, vb = a.numpy(), b.numpy()
    assert loss.numpy()[0] == pytest.approx(0.75 * (2 * va[1] ** 2 * va[0] + vb[1] ** 2 * vb[0]), rel=1e-12)
    tape.backward(loss=loss)
    np.testing.assert_allclose(a.grad.numpy(), central_differences(loss_value, a.numpy()), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(b.grad.numpy(), central_differences(loss_value, b.numpy()), rtol=1e-7, atol=1e-9)


def test_writes_through_elements_take_the_gradient_of_what_was_written():
    a, b, holders = make_holders(False)
    src = xsim.array([0.3, -0.7, 1.1], dtype=F, requires_grad=True)

    def loss_value():
        loss = xsim.zeros(1, dtype=F)
        xsim.launch(scatter_squares, 3, inputs=[holders, src])
        xsim.launch(sum_of_cubes, 4, inputs=[a, loss])
        xsim.launch(sum_of_cubes, 3, inputs=[b, loss])
        return float(loss.numpy()[0])

    loss = xsim.zeros(1, dtype=F, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(scatter_squares, 3, inputs=[holders, src])
        xsim.launch(sum_of_cubes, 4, inputs=[a, loss])
        xsim.launch(sum_of_cubes, 3, inputs=[b, loss])
    # elements 0 and 2 write a[1], element 1 writes b[1]: the last write to a[1] is one of two threads'
    assert b.numpy()[1] == pytest.approx(0.49) and a.numpy()[1] in (pytest.approx(0.09), pytest.approx(1.21))
    tape.backward(loss=loss)
    a_host, b_host = a.numpy().copy(), b.numpy().copy()
    # a[1] and b[1] were overwritten: their gradients stop at the write, as for any array
    assert a.grad.numpy()[1] == 0.0 and b.grad.numpy()[1] == 0.0
    np.testing.assert_allclose(a.grad.numpy()[[0, 2, 3]], 3 * a_host[[0, 2, 3]] ** 2, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy()[[0, 2]], 3 * b_host[[0, 2]] ** 2, rtol=1e-12)
    np.testing.assert_allclose(src.grad.numpy()[1], central_differences(loss_value, src.numpy())[1], rtol=1e-7)


def test_a_component_of_a_struct_inside_an_element_and_its_array_get_their_gradients():
    values = xsim.array([2.0, 5.0], dtype=F, requires_grad=True)
    offsets = xsim.array([[1.0, 2.0], [3.0, 4.0]], dtype=xsim.vec2d, requires_grad=True)
    outers = xsim.array([Outer(inner=Holder(values=values, weight=4.0), offsets=offsets)], dtype=Outer)
    src = xsim.array([0.5], dtype=F, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(nested_component_write, 1, inputs=[outers, src])
    np.testing.assert_allclose(values.numpy(), [2.0, 5.0])
    np.testing.assert_allclose(offsets.numpy(), [[1.0, 1.5], [3.0, 4.0]])
    values.grad.fill_(2.0)
    offsets.grad.fill_(xsim.vec2d(1.0, 10.0))
    tape.backward()
    assert src.grad.numpy()[0] == pytest.approx(3.0 * 10.0 + 4.0 * 2.0)
    np.testing.assert_allclose(values.grad.numpy(), [0.0, 2.0])
    np.testing.assert_allclose(offsets.grad.numpy(), [[1.0, 0.0], [1.0, 10.0]])


def test_the_array_keeps_the_arrays_its_elements_refer_to_alive():
    holders = xsim.array([Holder(values=xsim.array([7.0, 8.0], dtype=F), weight=1.0)], dtype=Holder)
    copy = xsim.clone(holders)
    del holders
    gc.collect()
    picks = xsim.array([1], dtype=int)
    loss = xsim.zeros(1, dtype=F)
    xsim.launch(weighted_sines, 1, inputs=[copy, picks, loss])
    assert loss.numpy()[0] == pytest.approx(np.sin(8.0) * 7.0, rel=1e-12)
    assert copy[0].values.numpy().tolist() == [7.0, 8.0]


def test_reading_and_writing_one_referred_array_is_refused_at_backward_naming_the_line():
    a, _, holders = make_holders(False)
    with xsim.Tape() as tape:
        xsim.launch(doubles_in_place, 3, inputs=[holders])
    with pytest.raises(xsim.CompileError, match=r"test_struct_array_elements\.py:\d+: array 'holders\[\]\.values'"):
        tape.backward(grads={a: xsim.ones(4, dtype=F)})


def test_overwriting_a_referred_array_after_the_tape_read_it_is_refused():
    a, _, holders = make_holders(False)
    src = xsim.array([0.3, -0.7, 1.1], dtype=F, requires_grad=True)
    loss = xsim.zeros(1, dtype=F, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(sum_of_cubes, 4, inputs=[a, loss])
        xsim.launch(scatter_squares, 3, inputs=[holders, src])  # writes a[1], which the first launch read
    with pytest.raises(RuntimeError, match="array 'x' read by kernel 'sum_of_cubes' was overwritten afterwards"):
        tape.backward(loss=loss)


def test_storing_a_struct_holding_arrays_into_an_array_element_is_refused_naming_the_line():
    @xsim.kernel(module="unique")
    def duplicates_first(holders: xsim.array(dtype=Holder)):
        holders[1] = holders[0]

    _, _, holders = make_holders(False)
    with pytest.raises(xsim.CompileError, match=r"(?s)test_struct_array_elements\.py:\d+.*cannot store a Holder, a struct "
                                                r"holding arrays, into an element of array 'holders'"):
        xsim.launch(duplicates_first, 1, inputs=[holders])


def test_elements_refer_only_to_arrays_on_the_outer_arrays_device(monkeypatch):
    inner = xsim.zeros(2, dtype=F)
    monkeypatch.setattr(inner, "device", "cuda:7")  # as an array on a GPU says where it is
    with pytest.raises(ValueError, match="cannot hold elements referring to an array on cuda:7"):
        xsim.array([Holder(values=inner)], dtype=Holder)


@xsim.kernel
def reads_past_the_end(holders: xsim.array(dtype=Holder), out: xsim.array(dtype=F)):
    out[0] = holders[0].values[5]


def test_debug_mode_names_the_referred_array_of_an_out_of_bounds_read(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    holders = xsim.array([Holder(values=xsim.zeros(2, dtype=F))], dtype=Holder)
    with pytest.raises(IndexError, match=r"index \(5,\) is out of bounds for array 'holders\[\]\.values' with "
                                         r"shape \(2,\)"):
        xsim.launch(reads_past_the_end, 1, inputs=[holders, xsim.zeros(1, dtype=F)])


@xsim.kernel
def ignores_holders(holders: xsim.array(dtype=Holder), x: xsim.array(dtype=F), out: xsim.array(dtype=F)):
    out[0] = 3.0 * x[0]


@pytest.mark.parametrize("holders", [None, "empty"])
def test_a_null_or_empty_array_of_such_structs_launches_and_differentiates(holders):
    holders = xsim.zeros(0, dtype=Holder) if holders == "empty" else holders
    x = xsim.array([2.0], dtype=F, requires_grad=True)
    out = xsim.zeros(1, dtype=F, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(ignores_holders, 1, inputs=[holders, x, out])
    tape.backward(loss=out)
    assert out.numpy()[0] == 6.0 and x.grad.numpy()[0] == 3.0
