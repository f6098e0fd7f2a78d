#!/usr/bin/env bash
# Installs the Debian packages zerod needs. Idempotent; run as root (or with
# sudo available) on a fresh Debian 12 machine.
#   scripts/setup.sh          everything: the build, tests and benchmarks
#   scripts/setup.sh --build  what configuring and building need, no more
#                             (scripts/demo.sh)
set -euo pipefail

# Configuring and building every target (CMakeLists.txt's find_package and
# pkg_check_modules).
build_packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-openmp-dev
  libabsl-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  liburing-dev
  # Tokenizers: ICU's regex and normalization (byte-level BPE), SentencePiece models.
  libicu-dev libsentencepiece-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsqlite3-dev libcpp-httplib-dev
)
# What the tests, benchmarks and zerod's dashboard use besides.
other_packages=(
  fio
  # zeroctl tokenize's chat templates, rendered by Jinja itself (runtime/tokenize/chat_template.h).
  python3-jinja2
  # The dashboard's charts, and the browser its test opens it in; promtool, which reads /metrics' page.
  libjs-chart.js chromium prometheus
  openssl
  # The deploy tests: hosts of namespaces reached over ssh, manifests read, the unit verified, a local Slurm.
  # (where an init system runs, openssh-server starts this machine's sshd too; the tests start their own.)
  iproute2 procps openssh-client openssh-server python3 python3-yaml systemd slurmctld slurmd slurm-client munge
  clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
)

case "${1:-}" in
  --build) packages=("${build_packages[@]}") ;;
  "") packages=("${build_packages[@]}" "${other_packages[@]}") ;;
  *) echo "usage: scripts/setup.sh [--build]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
