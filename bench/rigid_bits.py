"""Bit-level comparison of the float32 box pyramid (``rigid.py``'s ``xsim_pyramid``) between two xsim trees, for
checking that a refactor leaves results unchanged (issue 20 item 8).

Record, once per tree (``PYTHONPATH`` picks the tree, e.g. a ``git archive`` of an older commit)::

    PYTHONPATH=/tmp/old python bench/rigid_bits.py record old.npz --rows 8 --frames 100 [--trace]
    PYTHONPATH=$PWD     python bench/rigid_bits.py record new.npz --rows 8 --frames 100 [--trace]
    python bench/rigid_bits.py compare old.npz new.npz

``record`` saves each frame's body poses and contact count; ``--trace`` also a digest of every array each
kernel launch writes (``xsim.launch`` wrapped), so ``compare`` names the first launch whose output differs
as well as the first frame. An output is compared over the rows the launch covers (its ``dim``; the rest of a
pooled buffer holds whatever an earlier step left), and matched by content, not by position, since a
refactor may regroup arrays into struct arguments. ``--flags`` adds C++ compiler flags (``cpu.FLAGS``) in both
trees alike, e.g. ``--flags=-ffp-contract=fast`` to see what fused multiply-adds do.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import numpy as np


def _arrays(value, name):
    """(name, numpy copy) of an array argument, or of each array field of a struct argument."""
    import xsim
    if isinstance(value, xsim.array):
        return [(name, value.numpy().copy())]
    if hasattr(value, "_fields"):
        return [x for f in value._fields for x in _arrays(getattr(value, f), f"{name}.{f}")]
    return []


def _digest(a: np.ndarray) -> str:
    return hashlib.md5(np.ascontiguousarray(a).tobytes()).hexdigest()


def record(path: str, rows: int, frames: int, trace: bool, flags: list[str]) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import xsim
    from xsim.kernels import cpu
    cpu.FLAGS.extend(flags)
    from rigid import xsim_pyramid
    launches = []  # (frame, kernel key, dim, sorted output digests)
    frame_no = [0]
    if trace:
        launch = xsim.launch

        def traced(kernel, dim, inputs=(), outputs=(), *args, **kwargs):
            out = launch(kernel, dim, inputs, outputs, *args, **kwargs)
            n = dim if isinstance(dim, int) else int(np.prod(dim))
            digests = sorted(_digest(a[:n]) for v in outputs for _, a in _arrays(v, "out"))
            launches.append((frame_no[0], getattr(kernel, "key", str(kernel)), str(dim), digests))
            return out
        xsim.launch = traced
    frame, contacts = xsim_pyramid(rows)
    states = next(c.cell_contents for c in frame.__closure__ if isinstance(c.cell_contents, list))
    poses, counts = [], []
    for f in range(frames):
        frame_no[0] = f
        frame()
        poses.append(states[0].body_q.numpy().copy())
        counts.append(contacts())
    np.savez(path, body_q=np.array(poses), contacts=np.array(counts), xsim=xsim.__file__,
             launches=np.array([(f, k, d, " ".join(h)) for f, k, d, h in launches], dtype=object))
    print(f"{path}: {frames} frames of {rows} rows from {xsim.__file__}; last frame {counts[-1]} contacts")


def compare(a_path: str, b_path: str) -> bool:
    a, b = np.load(a_path, allow_pickle=True), np.load(b_path, allow_pickle=True)
    qa, qb = a["body_q"], b["body_q"]
    frames = min(len(qa), len(qb))
    same = [np.array_equal(qa[f].view(np.uint32), qb[f].view(np.uint32)) and a["contacts"][f] == b["contacts"][f]
            for f in range(frames)]
    print(f"{a_path} ({a['xsim']}) vs {b_path} ({b['xsim']}): {frames} frames")
    if all(same):
        print(f"bit-identical; last frame {a['contacts'][frames - 1]} contacts")
        return True
    first = same.index(False)
    print(f"first differing frame: {first} (0-based); max |dq| there {np.abs(qa[first] - qb[first]).max():.3g}, "
          f"at the end {np.abs(qa[frames - 1] - qb[frames - 1]).max():.3g}; contacts at the end "
          f"{a['contacts'][frames - 1]} vs {b['contacts'][frames - 1]}")
    la, lb = a["launches"], b["launches"]
    for i, (x, y) in enumerate(zip(la, lb)):
        if x[1] != y[1] or x[2] != y[2]:
            print(f"launch {i} (frame {x[0]}): kernels differ, {x[1]}[{x[2]}] vs {y[1]}[{y[2]}]")
            break
        missing = set(x[3].split()) - set(y[3].split())
        if missing:
            print(f"first launch with a differing output: {i} (frame {x[0]}), {x[1]} over {x[2]} threads "
                  f"({len(missing)} of its output arrays)")
            break
    return False


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("path")
    r.add_argument("--rows", type=int, default=8)
    r.add_argument("--frames", type=int, default=100)
    r.add_argument("--trace", action="store_true")
    r.add_argument("--flags", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args()
    if args.cmd == "record":
        record(args.path, args.rows, args.frames, args.trace, args.flags)
    else:
        sys.exit(0 if compare(args.a, args.b) else 1)


if __name__ == "__main__":
    main()
