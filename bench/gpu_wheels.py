"""Check that the wheels in a folder (``.whl/``, filled by bench/gpu_prepare.sh) make a complete install
for the lent GPU machine: CPython 3.12 on manylinux x86_64, no package registry (issue 38, item 6).

Each wheel must install on cp312 manylinux x86_64; each package must come once; and every requirement
of every carried wheel (``Requires-Dist`` without an extra, markers evaluated for Python 3.12 on Linux
x86_64) must be met by a carried wheel of a matching version, by a package of the device image
(bench/gpu_device_packages.txt; its versions are not known here, so those are named, not checked), or
be one of OMITTED, left out on purpose. Prints one line per finding; exit status 1 on any failure.
Standard library and ``packaging`` only (pip's vendored copy where ``packaging`` is not installed).
Run: ``python bench/gpu_wheels.py [.whl]``.
"""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # a bare interpreter: pip's vendored copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

# requirements deliberately not carried, and why (the report names each that a wheel asks for)
OMITTED = {
    "imageio-ffmpeg": "mp4 previews only (xsim run --preview out.mp4); no test or bench on the device needs it",
    "warp-lang": "its cp312 wheel is 149 MB (warp.so alone 115 MB compressed), over the 64 MiB a call carries",
    "newton": "needs warp-lang",
}
# the device: CPython 3.12 (3.12.3 in /opt/torch/.venv), glibc of its Ubuntu 24.04 base at most 2.39
MAX_GLIBC = (2, 39)
MARKER_ENV = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
              "implementation_name": "cpython", "platform_python_implementation": "CPython",
              "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"}


def tag_fits(tag) -> bool:
    """Whether one wheel tag installs on CPython 3.12, manylinux x86_64 with glibc <= MAX_GLIBC."""
    if tag.interpreter not in ("cp312", "py3", "py312", "py2.py3") and not (
            tag.interpreter.startswith("cp3") and tag.abi == "abi3" and int(tag.interpreter[3:]) <= 12):
        return False
    if tag.abi not in ("cp312", "abi3", "none"):
        return False
    p = tag.platform
    if p == "any":
        return True
    if p in ("linux_x86_64",):
        return False  # not a manylinux wheel: pip refuses it on another machine
    legacy = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}
    if p in legacy:
        return legacy[p] <= MAX_GLIBC
    if p.startswith("manylinux_") and p.endswith("_x86_64"):
        major, minor = p[len("manylinux_"):-len("_x86_64")].split("_")
        return (int(major), int(minor)) <= MAX_GLIBC
    return False


def requirements(wheel: Path, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """The wheel's Requires-Dist lines that apply on the device, installed with ``extras``."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = Parser().parsestr(z.read(meta).decode("utf-8"))
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**MARKER_ENV, "extra": e}) for e in {"", *extras}):
            out.append(req)
    return out


def check(folder: Path, device_list: Path) -> list[str]:
    """Findings, one line each; those that start with FAIL make the check fail."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        return [f"FAIL no wheels in {folder}: run bench/gpu_prepare.sh"]
    device = {canonicalize_name(n) for n in device_list.read_text().split() if n and not n.startswith("#")}
    found: list[str] = []
    carried: dict[str, object] = {}
    for w in wheels:
        name, version, _build, tags = parse_wheel_filename(w.name)
        if name in carried:
            found.append(f"FAIL two versions of {name}: {carried[name]} and {version} (pip stops the whole install)")
        carried[name] = version
        if not any(tag_fits(t) for t in tags):
            found.append(f"FAIL {w.name} does not install on CPython 3.12 manylinux x86_64")
    if "xsim" not in carried:
        found.append("FAIL no xsim wheel")
    files = {parse_wheel_filename(w.name)[0]: w for w in wheels}
    # each carried wheel as installed plain, then again with each extra another carried wheel asks of it
    todo, done = [(name, frozenset()) for name in files], set()
    while todo:
        name, extras = todo.pop(0)
        if (name, extras) in done:
            continue
        done.add((name, extras))
        label = f"{name}[{','.join(sorted(extras))}]" if extras else name
        for req in requirements(files[name], extras):
            if extras and (req.marker is None or req.marker.evaluate({**MARKER_ENV, "extra": ""})):
                continue  # already checked with the plain install
            dep = canonicalize_name(req.name)
            if dep in carried and req.extras:
                todo.append((dep, frozenset(req.extras)))
            name_shown = label
            if dep in carried:
                if req.specifier and not req.specifier.contains(str(carried[dep]), prereleases=True):
                    found.append(f"FAIL {name_shown} needs {req}, carried {dep} {carried[dep]}")
                else:
                    found.append(f"ok   {name_shown} needs {req}: carried {dep} {carried[dep]}")
            elif dep in device:
                found.append(f"ok   {name_shown} needs {req}: in the device image (version unchecked)")
            elif dep in OMITTED:
                found.append(f"omit {name_shown} needs {req}: not carried, {OMITTED[dep]}")
            else:
                found.append(f"FAIL {name_shown} needs {req}: neither carried nor in the device image")
    total = sum(w.stat().st_size for w in wheels)
    found.append(f"ok   {len(wheels)} wheels, {total / 2**20:.1f} MiB")
    return found


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".whl")
    findings = check(folder, Path(__file__).with_name("gpu_device_packages.txt"))
    print("\n".join(findings))
    return 1 if any(f.startswith("FAIL") for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
