#!/usr/bin/env bash
# Fill .whl/ (ignored by git) with the cp312 manylinux x86_64 wheels that bench/gpu_check.sh installs
# on the lent GPU machine, which reaches no package registry (issue 38, item 6). Run it here, from the
# repository root, with network access:
#
#     bash bench/gpu_prepare.sh
#
# Carried: only what the device image lacks or holds at another version than xsim is tested with
# (the image's package list: bench/gpu_device_packages.txt, from .library/device/KINDS.md):
#   xsim itself (a wheel of this working tree), cuda-python/cuda-bindings/cuda-pathfinder at the
#   versions of /work/main/.venv, trimesh, usd-core and tomli-w: about 36 MiB.
# Left to the image: numpy, scipy, pytest, pytest-xdist, hypothesis, tqdm, imageio, matplotlib,
#   nvidia-cuda-nvrtc (CUDA 13), torch (2.11, not the 2.13 of the test extra).
# Not carried: warp-lang 1.19.0, whose cp312 wheel is 149 MB (warp/bin/warp.so alone 115 MB compressed),
#   over the 64 MiB one call carries, and so newton, which needs it: the device benchmarks run xsim
#   alone (bench/gpu_wheels.py, OMITTED); ray (tests/distributed skip without it); imageio-ffmpeg
#   (mp4 previews only).
# The total must stay under the device tool's 64 MiB carry limit, with room for the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-/work/main/.venv/bin/python -m pip}
LIMIT_MIB=${GPU_CARRY_LIMIT_MIB:-56}   # 64 MiB in all; the tracked tree travels beside .whl

# name==version, one a line; versions are those /work/main/.venv runs the suite with
WHEELS=(
  cuda-python==13.4.4
  cuda-bindings==13.4.4
  cuda-pathfinder==1.9.1
  trimesh==5.2.0
  usd-core==26.11
  tomli-w==1.2.0
)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64
           --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_35_x86_64)

rm -rf .whl && mkdir -p .whl
grep -qx '/.whl/' .gitignore 2>/dev/null || grep -qx '/.whl/' .git/info/exclude 2>/dev/null \
  || echo '/.whl/' >> "$(git rev-parse --git-path info/exclude)"
$PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
  -d .whl "${WHEELS[@]}"
# xsim: a pure-Python wheel of this working tree (its native headers are package data)
$PIP wheel -q --no-deps --no-build-isolation -w .whl .
# which tree the xsim wheel holds (the device's copy of the tree may travel without .git)
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes') $(date -u +%Y-%m-%dT%H:%MZ)" >.whl/SOURCE

ls -l .whl
total=$(du -cb .whl/*.whl | tail -1 | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
echo "wheels: $((total / 1048576)) MiB; tracked tree: $((tree / 1048576)) MiB; wheel limit: ${LIMIT_MIB} MiB"
if (( total > LIMIT_MIB * 1048576 )); then
  echo "FAIL: .whl is over ${LIMIT_MIB} MiB: drop the largest optional wheel (usd-core) and say so" >&2
  exit 1
fi
# the check runs under any Python 3.8+; a 3.12 one reads the markers as the device does either way
for PY12 in "${PY12:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 python3; do
  [[ -n $PY12 ]] && "$PY12" -V >/dev/null 2>&1 && break
done
"$PY12" bench/gpu_wheels.py .whl
echo "ok: now run bench/gpu_check.sh --dry-run, then the device call in bench/README.md (GPU check)"
