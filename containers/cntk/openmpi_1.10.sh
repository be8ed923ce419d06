#!/usr/bin/env bash
# post_install of CNTK's GPU build (containers/cntk/gpu.yaml, base cuda10): OpenMPI 1.10.3, the
# series cntk-gpu 2.7 links (libmpi.so.12, libmpi_cxx.so.1), built from source CUDA-aware as
# CNTK's Linux guide does, into /usr/local/mpi; mpi_compat.sh, run next, links its sonames.
# Several GPUs are MPI ranks under this mpiexec (CNTK_MPIEXEC, trainers/cntk/mpi.py).
# Runs in an Apptainer build (network on). Environment: ENV_DIR, PYTHON, RECIPE_DIR.
set -euo pipefail
cd /tmp
wget -q https://download.open-mpi.org/release/open-mpi/v1.10/openmpi-1.10.3.tar.gz
tar xzf openmpi-1.10.3.tar.gz
cd openmpi-1.10.3
./configure --prefix=/usr/local/mpi --with-cuda=/usr/local/cuda > /tmp/openmpi-configure.log
make -j"$(nproc)" install > /tmp/openmpi-make.log
cd / && rm -rf /tmp/openmpi-1.10.3* /tmp/openmpi-*.log
echo /usr/local/mpi/lib > /etc/ld.so.conf.d/openmpi.conf && ldconfig
echo "openmpi_1.10.sh: $(/usr/local/mpi/bin/mpiexec --version | head -1)"
