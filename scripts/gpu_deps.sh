#!/usr/bin/env bash
# Fetches, on a Debian 12 machine with a network, the Debian packages that
# the GPU machines lack (they have CUDA, cmake, ninja and a compiler, but no
# -dev packages and no network) into .gpu-deps/prefix.tar.xz, which travels
# with the tree to the GPU machine; scripts/gpu_check.sh unpacks it there
# into a private prefix. The build there has no gRPC, and MPI only in the
# ranks section (the machine's own). Beside it: the wheels of the LoRA
# anchors (.gpu-deps/wheels), DeepSpeed's (.gpu-deps/deepspeed), a copy of
# ../shared/anchors (.gpu-deps/anchors) and fio's source. Carry .gpu-deps.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  libabsl-dev libabsl20220623
  nlohmann-json3-dev libcli11-dev
  libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev libgfortran5
  liburing-dev liburing2
  libicu-dev libicu72 libsentencepiece-dev libsentencepiece0
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libgtest-dev libgmock-dev
  pkgconf pkgconf-bin libpkgconf3
)

mkdir -p .gpu-deps
cd .gpu-deps
rm -f ./*.deb prefix.tar.xz
apt-get update -q >/dev/null
# Unpacked into one prefix, less what the build never reads (static
# libraries other than GoogleTest's, documentation), and packed with xz:
# 21 MB where the packages are 36, of the 64 MiB that travel.
debs=$(mktemp -d)
(cd "$debs" && apt-get download -q "${packages[@]}")
for f in "$debs"/*.deb; do dpkg -x "$f" "$debs/prefix"; done
find "$debs/prefix" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
rm -rf "$debs/prefix/usr/share/doc" "$debs/prefix/usr/share/man"
tar cJf prefix.tar.xz -C "$debs/prefix" .
rm -rf "$debs"
# The LoRA anchors' Python packages, which the GPU machines' Python (torch
# and transformers) lacks: PEFT, its accelerate, and bitsandbytes (its wheel
# carries CUDA builds); wheels of any Python 3.
mkdir -p wheels
python3 -m pip download -q --no-deps --only-binary=:all: -d wheels peft accelerate bitsandbytes ||
  echo "gpu_deps: no wheels of peft, accelerate and bitsandbytes (no pip or no index): the lora section runs zerod alone"
# What travels is at most 64 MiB: bitsandbytes' wheel (43 MB) loses its
# libraries for other CUDA versions, ROCm and XPU, and their RECORD lines.
for wheel in wheels/bitsandbytes-*.whl; do
  [ -f "$wheel" ] || continue
  python3 - "$wheel" <<'PY'
import re, sys, zipfile
path = sys.argv[1]
drop = re.compile(r"libbitsandbytes_(cuda1[0-2]\d|rocm|xpu)")
with zipfile.ZipFile(path) as z:
    items = [(i, z.read(i)) for i in z.infolist() if not drop.search(i.filename)]
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for info, data in items:
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(l for l in data.splitlines(True) if not drop.search(l.decode()))
        z.writestr(info, data)
PY
done
# DeepSpeed, for its ZeRO-Offload anchor (gpu_check.sh deepspeed): the
# sdist, installed there with DS_BUILD_OPS=0 (CPU Adam compiles at run
# time), and the wheels of what its requirements name that the GPU
# machines' Python (3.12) may lack: hjson and pydantic with its own needs,
# and einops, msgpack, ninja and py-cpuinfo (the image lists these four,
# anchors/README.md does not).
mkdir -p deepspeed
{ python3 -m pip download -q --no-deps --no-binary=:all: -d deepspeed deepspeed==0.19.8 &&
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d deepspeed \
    hjson 'pydantic>=2' einops msgpack ninja py-cpuinfo; } ||
  echo "gpu_deps: no DeepSpeed (no pip or no index): the deepspeed section runs zerod alone"
# The anchors themselves: ../shared does not travel to the GPU machine.
chmod -R u+w anchors 2>/dev/null; rm -rf anchors && cp -r --no-preserve=mode ../../shared/anchors anchors
# fio, for the NVMe check against it (gpu_check.sh largest): Debian's
# source, built there (its binary package pulls in Ceph's and Gluster's
# libraries).
fio=fio_3.33.orig.tar.gz
curl -fsS -o "$fio" "http://deb.debian.org/debian/pool/main/f/fio/$fio" &&
  echo "709d1385de95294fea7146a5f0d5675d  $fio" | md5sum -c --quiet ||
  { rm -f "$fio"; echo "gpu_deps: no fio source: the largest section's NVMe check runs only where fio is installed"; }
# NCCL's header, for where the GPU machine's NCCL comes without one.
mkdir -p include
cp "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/../include/nccl.h" include/
du -sh .
