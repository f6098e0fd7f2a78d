#!/usr/bin/env bash
# Fetches, on a Debian 12 machine with a network, the Debian packages that
# the GPU machines lack (they have CUDA, cmake, ninja and a compiler, but no
# -dev packages and no network) into .gpu-deps/, which travels with the tree
# to the GPU machine; scripts/gpu_check.sh unpacks them there into a private
# prefix. The build there is CUDA-only: no MPI, no gRPC, no benchmarks.
# Python wheels for the LoRA anchors go into .gpu-deps/wheels.
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
rm -f ./*.deb
apt-get update -q >/dev/null
apt-get download -q "${packages[@]}"
# The LoRA anchors' Python packages, which the GPU machines' Python (torch
# and transformers) lacks: PEFT, its accelerate, and bitsandbytes (its wheel
# carries CUDA builds); wheels of any Python 3.
mkdir -p wheels
python3 -m pip download -q --no-deps --only-binary=:all: -d wheels peft accelerate bitsandbytes ||
  echo "gpu_deps: no wheels of peft, accelerate and bitsandbytes (no pip or no index): the lora section runs zerod alone"
# NCCL's header, for where the GPU machine's NCCL comes without one.
mkdir -p include
cp "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/../include/nccl.h" include/
du -sh .
