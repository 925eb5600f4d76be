"""The solver's particle-constraint bookkeeping (``particle_constraints.py``): slot layout and
mass-splitting counts built from the Model's plain constraint arrays."""

import numpy as np

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.generic import specialized
from xsim.solvers.xpbd import kernels as particle_kernels
from xsim.solvers.xpbd.particle_constraints import KINDS, ParticleConstraints


def test_each_particle_gets_one_slot_and_one_entry_per_constraint_end():
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=2, dim_y=2,
                     cell_x=0.1, cell_y=0.1, mass=1.0, area_compliance=0.0)
    b.add_soft_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=1, dim_y=1, dim_z=1,
                    cell_x=0.1, cell_y=0.1, cell_z=0.1, density=100.0, youngs_modulus=1e4, poisson_ratio=0.3)
    m = b.finalize()
    pc = ParticleConstraints(m, specialized(particle_kernels.__name__, m.dtype))
    assert [k.name for k in pc.kinds] == [k.name for k in KINDS]
    counts = pc.slot_count.numpy()
    owners = np.concatenate([getattr(m, f"{k.name}_indices").numpy().ravel() for k in pc.kinds])
    columns = np.concatenate([pc.slots[k.name].numpy().ravel() for k in pc.kinds])
    entries = pc.entry_index.numpy()
    assert pc.width == counts.max() and pc.entry_count == len(owners)
    for p in range(m.particle_count):
        np.testing.assert_array_equal(np.sort(columns[owners == p]), np.arange(counts[p]))
        # each of its slots names one of its entries, and each entry once
        np.testing.assert_array_equal(owners[entries[p, :counts[p]]], p)
        np.testing.assert_array_equal(entries[p, columns[owners == p]], np.flatnonzero(owners == p))
        assert pc.split.numpy()[p] == counts[p]
    # the centre vertex: 6 edges, 8 bending stencils (its 6 edges + 2 diagonals it faces), 6 triangles
    assert counts[4] == 6 + 8 + 6
    # kind blocks follow each other, arity entries per constraint
    assert pc.blocks == {"spring": (0, 2 * m.spring_count),
                         "bending": (2 * m.spring_count, 2 * m.spring_count + 4 * m.bending_count),
                         "area": (2 * m.spring_count + 4 * m.bending_count, len(owners) - 4 * m.tet_count),
                         "tet": (len(owners) - 4 * m.tet_count, len(owners))}


def test_kinds_without_constraints_are_left_out_and_damping_is_read_only_where_set():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 0.0), mass=0.0)
    b.add_particle((0.0, 0.0, -1.0))
    b.add_particle((0.0, 0.0, -2.0))
    b.add_spring(0, 1, compliance=1e-3)
    b.add_spring(1, 2, compliance=1e-3, damping=2.0)
    pc = ParticleConstraints(b.finalize(dtype=xsim.float64), specialized(particle_kernels.__name__, xsim.float64))
    assert [k.name for k in pc.kinds] == ["spring"] and pc.damped == {"spring": True}
    np.testing.assert_array_equal(pc.slot_count.numpy(), [1, 2, 1])
    b.spring_damping[1] = 0.0
    assert ParticleConstraints(b.finalize(), specialized(particle_kernels.__name__, xsim.float32)).damped == {"spring": False}
    model = b.finalize(requires_grad=True)
    assert not model.spring_damping.requires_grad  # all zero: its gradient is not tracked...
    assert ParticleConstraints(model, specialized(particle_kernels.__name__, xsim.float32)).damped == {"spring": False}
    model.spring_damping.requires_grad = True  # ...unless asked for, and then the damping term is kept
    assert ParticleConstraints(model, specialized(particle_kernels.__name__, xsim.float32)).damped == {"spring": True}
