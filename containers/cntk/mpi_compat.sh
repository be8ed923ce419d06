#!/usr/bin/env bash
# post_install for the CNTK venv (env.yaml): make $ENV_DIR/mpi-compat, a directory of links
# from the OpenMPI 1.10 sonames CNTK 2.7 was linked against to the system's OpenMPI 4.x
# libraries, and check that CNTK imports with it on LD_LIBRARY_PATH.
#
# Safe for what the local venv does (one process, CPU: CNTK initialises MPI but never
# communicates). NOT safe for MPI-distributed training: the 1.10 and 4.x ABIs differ.
set -euo pipefail
: "${ENV_DIR:?}" "${PYTHON:?}"
compat="$ENV_DIR/mpi-compat"
mkdir -p "$compat"

find_lib() {  # the path of shared library $1 (a soname), from ldconfig or the usual dirs
  local path
  path="$(/sbin/ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')"
  if [ -z "$path" ]; then
    for dir in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib \
               /usr/lib/x86_64-linux-gnu/openmpi/lib /usr/lib64/openmpi/lib; do
      [ -e "$dir/$1" ] && { path="$dir/$1"; break; }
    done
  fi
  [ -n "$path" ] && echo "$path"
}

for pair in libmpi.so.12:libmpi.so.40 libmpi_cxx.so.1:libmpi_cxx.so.40; do
  want="${pair%%:*}" have="${pair##*:}"
  if real="$(find_lib "$want")"; then         # a real OpenMPI 1.10 is installed: use it
    ln -sfn "$real" "$compat/$want"
  elif real="$(find_lib "$have")"; then
    ln -sfn "$real" "$compat/$want"
  else
    echo "mpi_compat.sh: neither $want nor $have found; install Debian's libopenmpi3" \
         "(containers/cntk/debian-packages.txt)" >&2
    exit 1
  fi
  echo "mpi_compat.sh: $compat/$want -> $real"
done

# (CNTK's import-time library check runs `ldconfig -N -v` on LD_LIBRARY_PATH, which as root
# writes soname links into it; it is stubbed here as trainers/cntk/libpath.py does)
LD_LIBRARY_PATH="$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PYTHON" -W ignore -c "
import sys, types
stub = types.ModuleType('cntk.cntk_py_init')
stub.cntk_check_distro_info = stub.cntk_check_libs = lambda: None
sys.modules['cntk.cntk_py_init'] = stub
import cntk
print('mpi_compat.sh: cntk', cntk.__version__, 'imports')"
