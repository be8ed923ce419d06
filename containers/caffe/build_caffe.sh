#!/usr/bin/env bash
# post_install of the Caffe venv recipe (env.yaml): build BVLC Caffe's Python interface (pycaffe,
# CPU only) from source and put the `caffe` package into the venv's site-packages.
#
# Debian Bookworm has no Caffe package and PyPI no usable wheel, so the source is the sdist of
# `brocolli-caffe` (BVLC Caffe at commit 9b89154, trimmed to the library and pycaffe, CPU only;
# its own setup.py wants conda, so it is built here with CMake instead). Its CMake build needs
# only: boost_python for this interpreter's version instead of the generic `-lboost_python`,
# and the Python, numpy and HDF5 paths given by hand (it otherwise looks in ANACONDA_HOME).
# The Debian packages it needs are in debian-packages.txt (scripts/frameworks.sh installs them).
#
# The build (minutes) is cached under <cache>/build/caffe-<key>, where <cache> is the
# directory holding envs/ (ORCHESTRATOR_CACHE) and <key> hashes what the product depends on:
# this script, the source version, the Python and numpy versions, protoc's version and the
# boost_python library. A second environment with the same key copies the cached package in
# seconds. The venv gets a copy (not a link), so it keeps working if the cache is cleaned.
#
# Environment (set by orchestrator.envs.runtime.VenvRuntime): ENV_DIR, PYTHON, RECIPE_DIR.
# Optional: CAFFE_BUILD_JOBS (default: all CPUs), CAFFE_SDIST (a local brocolli-caffe sdist).
set -euo pipefail

SDIST_NAME=brocolli-caffe
SDIST_VERSION=9.0.2
: "${ENV_DIR:?ENV_DIR not set (run by the venv runtime)}"
: "${PYTHON:?PYTHON not set}"
CACHE="$(dirname "$(dirname "$ENV_DIR")")"
JOBS="${CAFFE_BUILD_JOBS:-$(nproc)}"

say() { echo "[caffe-build] $*"; }
die() { echo "[caffe-build] ERROR: $*" >&2; exit 1; }

for tool in cmake make g++ protoc; do
  command -v "$tool" >/dev/null || die "$tool not found; install containers/caffe/debian-packages.txt (scripts/frameworks.sh caffe does it as root)"
done

read -r PY_XY PY_INCLUDE NUMPY_INCLUDE NUMPY_VERSION SITE <<<"$("$PYTHON" - <<'PY'
import sys, sysconfig, numpy
print("%d%d" % sys.version_info[:2], sysconfig.get_paths()["include"], numpy.get_include(),
      numpy.__version__, sysconfig.get_paths()["purelib"])
PY
)"
[ -f "$PY_INCLUDE/Python.h" ] || die "no Python.h in $PY_INCLUDE (install the interpreter's -dev package)"

MULTIARCH="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
BOOST_PY_LIB=""
for dir in /usr/lib/"$MULTIARCH" /usr/lib /usr/local/lib; do
  if [ -e "$dir/libboost_python$PY_XY.so" ]; then BOOST_PY_LIB="$dir/libboost_python$PY_XY.so"; break; fi
done
[ -n "$BOOST_PY_LIB" ] || die "no libboost_python$PY_XY.so: libboost-python-dev must be built for this interpreter's Python ${PY_XY:0:1}.${PY_XY:1} (use the Python the distribution's Boost.Python targets)"

HDF5_INCLUDE="$(dirname "$(find /usr/include -name hdf5.h -path '*serial*' -print -quit 2>/dev/null || true)")"
[ -f "$HDF5_INCLUDE/hdf5.h" ] || HDF5_INCLUDE="$(dirname "$(find /usr/include -name hdf5.h -print -quit)")"
[ -f "$HDF5_INCLUDE/hdf5.h" ] || die "hdf5.h not found (libhdf5-dev)"
HDF5_LIBDIR="$(dirname "$(find /usr/lib -name 'libhdf5.so' -path '*serial*' -print -quit 2>/dev/null || true)")"
[ -e "$HDF5_LIBDIR/libhdf5.so" ] || HDF5_LIBDIR="$(dirname "$(find /usr/lib -name 'libhdf5.so' -print -quit)")"
[ -e "$HDF5_LIBDIR/libhdf5.so" ] || die "libhdf5.so not found (libhdf5-dev)"

KEY="$( { cat "${BASH_SOURCE[0]}"; echo "$SDIST_NAME $SDIST_VERSION py$PY_XY numpy${NUMPY_VERSION%%.*}";
          protoc --version; readlink -f "$BOOST_PY_LIB"; } | sha256sum | cut -c1-12)"
BUILD="$CACHE/build/caffe-$KEY"
mkdir -p "$CACHE/build"

exec 9>"$BUILD.lock"
flock 9  # another environment may be building the same key right now
if [ -f "$BUILD/.done" ]; then
  say "reusing the cached build $BUILD"
else
  start=$SECONDS
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
  sdist="${CAFFE_SDIST:-$CACHE/build/sdist/$SDIST_NAME-$SDIST_VERSION.tar.gz}"
  if [ ! -f "$sdist" ]; then
    say "downloading the $SDIST_NAME $SDIST_VERSION sdist"
    mkdir -p "$CACHE/build/sdist"
    "$PYTHON" -m pip download --quiet --progress-bar off --no-deps --no-binary :all: \
      -d "$CACHE/build/sdist" "$SDIST_NAME==$SDIST_VERSION"
  fi
  [ -f "$sdist" ] || die "no sdist at $sdist"
  tar -xzf "$sdist" -C "$BUILD"
  SRC="$BUILD/$SDIST_NAME-$SDIST_VERSION"
  # the one source change: link the Boost.Python of this interpreter's version
  sed -i "s/-lboost_python /-lboost_python$PY_XY /" "$SRC/python/CMakeLists.txt"
  grep -q -- "-lboost_python$PY_XY " "$SRC/python/CMakeLists.txt" || die "could not patch python/CMakeLists.txt"
  say "configuring (Python ${PY_XY:0:1}.${PY_XY:1}, numpy $NUMPY_VERSION, $(protoc --version), $(basename "$(readlink -f "$BOOST_PY_LIB")"))"
  mkdir -p "$BUILD/cmake-build"
  (cd "$BUILD/cmake-build" && cmake "$SRC" \
      -DCMAKE_BUILD_TYPE=Release \
      -DANACONDA_HOME=/nonexistent \
      -DCPU_ONLY=ON -DUSE_CUDNN=OFF -DUSE_NCCL=OFF -DUSE_OPENCV=OFF -DUSE_LEVELDB=OFF -DUSE_LMDB=OFF \
      -DBLAS=Open \
      -DPYTHON_EXECUTABLE="$PYTHON" \
      -DCMAKE_CXX_FLAGS="-I$PY_INCLUDE -I$NUMPY_INCLUDE -I$HDF5_INCLUDE -Wno-deprecated-declarations" \
      -DCMAKE_SHARED_LINKER_FLAGS="-L$HDF5_LIBDIR" \
      > "$BUILD/cmake.log" 2>&1) || { tail -40 "$BUILD/cmake.log"; die "cmake failed (log: $BUILD/cmake.log)"; }
  say "compiling pycaffe with $JOBS jobs (a few minutes; log: $BUILD/make.log)"
  (cd "$BUILD/cmake-build" && make -j"$JOBS" pycaffe > "$BUILD/make.log" 2>&1) \
    || { grep -m20 -B2 -A8 "error" "$BUILD/make.log" | tail -60; die "make pycaffe failed (log: $BUILD/make.log)"; }
  # the importable package: sources, generated protobuf modules and the extension (a real file)
  mkdir -p "$BUILD/python"
  cp -rL "$SRC/python/caffe" "$BUILD/python/caffe"
  rm -rf "$BUILD/python/caffe/test" "$BUILD/python/caffe/__pycache__"
  [ -f "$BUILD/python/caffe/_caffe.so" ] || die "the build produced no _caffe.so"
  [ -f "$BUILD/python/caffe/proto/caffe_pb2.py" ] || die "the build produced no caffe_pb2.py"
  touch "$BUILD/.done"
  say "built in $((SECONDS - start)) s"
fi

rm -rf "$SITE/caffe"
cp -r "$BUILD/python/caffe" "$SITE/caffe"
echo "$BUILD" > "$SITE/caffe/BUILT_FROM"
GLOG_minloglevel=2 "$PYTHON" -c "import caffe; print('[caffe-build] import caffe: ok,', caffe.__version__)"
