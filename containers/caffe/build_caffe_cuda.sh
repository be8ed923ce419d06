#!/usr/bin/env bash
# post_install of Caffe's GPU build (containers/caffe/gpu.yaml, base cuda10): BVLC Caffe at commit
# 9b89154 from its full source with CUDA, cuDNN 7 and NCCL, installed to /opt/caffe, with the
# `caffe` package on the venv's path (a .pth file) and the `caffe` tool, which trains several GPUs
# (`caffe train --gpu=0,1`, what trainers/caffe/multigpu.py runs), linked into the venv's bin/.
#
# Same CMake choices as the CPU build (build_caffe.sh): OpenBLAS, Boost.Python for this Python 3,
# no OpenCV/LMDB/LevelDB (the trainer feeds batches through an Input layer; the multi-GPU tool
# reads an HDF5 file), HDF5's serial flavour. Runs in an Apptainer build (network on), about 30 min
# on 8 cores. Environment: ENV_DIR, PYTHON, RECIPE_DIR (as every post_install).
# Optional: CAFFE_CUDA_ARCH_BIN (default "35 60 70"), CAFFE_BUILD_JOBS (default: all CPUs).
set -euo pipefail
: "${ENV_DIR:?}" "${PYTHON:?}"
SRC=/opt/caffe-src
git clone --quiet https://github.com/BVLC/caffe.git "$SRC"
git -C "$SRC" checkout --quiet 9b89154
mkdir -p "$SRC/build"
cd "$SRC/build"
cmake .. \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX=/opt/caffe \
    -DCPU_ONLY=OFF -DUSE_CUDNN=ON -DUSE_NCCL=ON \
    -DCUDA_ARCH_NAME=Manual -DCUDA_ARCH_BIN="${CAFFE_CUDA_ARCH_BIN:-35 60 70}" -DCUDA_ARCH_PTX="70" \
    -DBLAS=Open -Dpython_version=3 -DPYTHON_EXECUTABLE="$PYTHON" -DBUILD_python=ON \
    -DBUILD_python_layer=OFF -DUSE_OPENCV=OFF -DUSE_LMDB=OFF -DUSE_LEVELDB=OFF -DBUILD_docs=OFF \
    -DHDF5_INCLUDE_DIRS=/usr/include/hdf5/serial \
    -DCMAKE_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/hdf5/serial
make -j"${CAFFE_BUILD_JOBS:-$(nproc)}" all pycaffe
make install
cd / && rm -rf "$SRC"
SITE="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo /opt/caffe/python > "$SITE/caffe.pth"
echo /opt/caffe/lib > /etc/ld.so.conf.d/caffe.conf && ldconfig
ln -sf /opt/caffe/bin/caffe "$ENV_DIR/bin/caffe"
GLOG_minloglevel=2 "$PYTHON" -c "import caffe; print('[caffe-build] import caffe: ok,', caffe.__version__)"
