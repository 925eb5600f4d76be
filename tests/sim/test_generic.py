"""The solver kernels' generic types and their binding to one scalar type (``xsim.sim.generic``):
every parameter comes out concrete, one module per (file, scalar type), and a parameter that names no
scalar type variable is refused with its type named. No kernel is compiled here."""

from typing import Any

import pytest

import xsim
from xsim import types as T
from xsim.sim import kinematics
from xsim.sim.generic import Transform, Vec3s2, bind_scalar, specialized
from xsim.solvers.xpbd import contacts_rigid, joint_kernels, rigid_kernels
from xsim.solvers.xpbd import kernels as particle_kernels


def test_generic_quaternion_and_transformation_types_bind_to_their_scalar():
    q, tf = T.quaternion(xsim.Float), T.transformation(Any)
    assert T.is_generic(q) and T.is_generic(xsim.array(dtype=tf))
    assert T.bind(q, xsim.quatd) and not T.bind(q, xsim.vec4d) and not T.bind(q, xsim.types.quaternion(xsim.int32))
    assert T.bind(tf, xsim.transform) and not T.bind(tf, xsim.types.vector(7, xsim.float32))
    assert q.concrete(xsim.float64) is xsim.quatd and Transform.concrete(xsim.float32) is xsim.transform
    assert repr(q) == "quaternion(dtype=Float)" and T.quaternion(xsim.float64) is xsim.quatd


def test_bind_scalar_makes_every_part_of_a_type_concrete():
    assert bind_scalar(Vec3s2, xsim.float64) == xsim.array(dtype=xsim.vec3d, ndim=2)
    assert bind_scalar(xsim.array(dtype=Transform), xsim.float32) == xsim.array(dtype=xsim.transform)
    assert bind_scalar(xsim.Float, xsim.float64) is xsim.float64 and bind_scalar(int, xsim.float64) is int
    with pytest.raises(TypeError, match="int32 is not one of the types Float stands for"):
        bind_scalar(xsim.Float, xsim.int32)
    with pytest.raises(TypeError, match="typed Any has no scalar type to bind; use Float"):
        bind_scalar(Any, xsim.float64)


@pytest.mark.parametrize("module", [particle_kernels, rigid_kernels, joint_kernels, contacts_rigid, kinematics])
def test_specialized_binds_every_generic_kernel_of_a_file_into_one_module_per_scalar_type(module):
    generic = {name: k for name, k in vars(module).items() if isinstance(k, xsim.Kernel) and k.generic}
    assert generic, "the file defines its kernels at module level"
    for scalar in (xsim.float32, xsim.float64):
        ns = specialized(module.__name__, scalar)
        assert specialized(module.__name__, scalar) is ns
        assert set(vars(ns)) == set(generic)
        for name, k in vars(ns).items():
            assert not k.generic and k.pyfunc is generic[name].pyfunc
            assert k.module_name == f"{module.__name__}_{T.type_name(scalar)}"
            assert all(not T.is_generic(t) for _, t in k.params)
            scalars = {getattr(getattr(t, "dtype", t), "_scalar", getattr(t, "dtype", t)) for _, t in k.params}
            assert scalar in scalars and ({xsim.float32, xsim.float64} - {scalar}).isdisjoint(scalars)
