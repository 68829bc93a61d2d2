#!/usr/bin/env bash
# Installs evotune's build and test dependencies from Debian 12 packages.
# Idempotent: packages already present are left as they are. The CUDA Toolkit
# (NVRTC, driver API headers) is expected at /usr/local/cuda or $CUDA_HOME.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libsqlite3-dev sqlite3 libgtest-dev libgmock-dev openssl
  libxgboost-dev
  slurmctld slurmd slurm-client munge
  python3-grpcio python3-protobuf python3-setuptools python3-venv python3-yaml
)
# kubectl (Debian's kubernetes-client) unless one is on the PATH already.
command -v kubectl >/dev/null || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done

if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_home/include/nvrtc.h" ]; then
  echo "setup: the CUDA Toolkit was not found at $cuda_home (set CUDA_HOME); install it from NVIDIA first" >&2
  exit 1
fi
echo "setup: CUDA Toolkit at $cuda_home"
