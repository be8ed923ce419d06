"""Facts about the host, read one way for every trainer and for the orchestrator's provenance.

The trainers put the CPU's name in a CPU run's `devices` list, size their thread pools by
the CPUs they may use and set the pools of the OpenBLAS builds they have loaded; the job records the same facts in result.json's `provenance`
(orchestrator/job/provenance.py imports this module), so the two can never disagree. Standard
library only, and Python 3.6 (the Caffe and CNTK containers).
"""
import ctypes
import os
import platform

#: what an OpenBLAS build calls its pool-size setter and getter: the plain build, its 64-bit
#: integer build, and the scipy-openblas builds that numpy's wheels bundle
OPENBLAS_SETTERS = ("openblas_set_num_threads", "openblas_set_num_threads64_",
                    "scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads")
OPENBLAS_GETTERS = ("openblas_get_num_threads", "openblas_get_num_threads64_",
                    "scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads")

#: each BLAS's pool-size getter, where it has one (ATLAS's and netlib's are fixed: serial builds)
THREAD_GETTERS = {"OpenBLAS": OPENBLAS_GETTERS, "BLIS": ("bli_thread_get_num_threads",),
                  "MKL": ("MKL_Get_Max_Threads", "mkl_get_max_threads")}

#: How a loaded library shows which BLAS it is: (name, symbols only that BLAS exports, how its first
#: symbol gives the version: "returns" a string, fills a "buffer" it is handed (MKL's
#: mkl_get_version_string(buf, len)), or None: it gives none), asked in this order (OpenBLAS and
#: MKL export BLIS's cgemm3m too). Debian's BLIS exports no version getter, only its extensions;
#: ATLAS its Fortran wrappers. A BLAS with none of these (it exports sgemm_) is netlib's reference
#: BLAS. Read from the libraries the process has loaded, never from a build's name.
BLAS_MARKERS = (
    ("OpenBLAS", ("openblas_get_config", "openblas_get_config64_", "scipy_openblas_get_config64_",
                  "scipy_openblas_get_config"), "returns"),
    ("MKL", ("mkl_get_version_string",), "buffer"),
    ("BLIS", ("bli_info_get_version_str", "cblas_cgemm3m"), "returns"),
    ("ATLAS", ("ATL_buildinfo", "atl_f77wrap_sgemm_"), None),
)
#: words in a shared object's file name that make it worth asking (blas_libraries); a LAPACK is
#: not (it answers for the BLAS it links, which is asked itself)
BLAS_FILE_WORDS = ("blas", "blis", "atlas", "mkl")

#: /proc/cpuinfo keys that name the CPU: x86 ("model name"), ARM boards ("Model", "Hardware"), MIPS ("cpu model")
CPU_MODEL_KEYS = ("model name", "Model", "cpu model", "Hardware")


def available_cpus():
    """CPUs this process may run on (its affinity mask, which Slurm and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name: the first model line of `cpuinfo` (Linux), else the platform's
    word for the processor; None when neither says."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in CPU_MODEL_KEYS and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_name():
    """The CPU's name for a CPU run's `devices` list: its model, else the machine type, else "cpu"."""
    return cpu_model() or platform.machine() or "cpu"


def loaded_libraries(maps="/proc/self/maps"):
    """Paths of the shared objects this process has loaded (Linux; [] elsewhere)."""
    try:
        with open(maps) as f:
            return sorted(set(line.split()[-1] for line in f if ".so" in line))
    except OSError:
        return []


def openblas_libraries():
    """[(path, ctypes library)] of the OpenBLAS builds this process has loaded that export a
    pool-size setter (a framework's own and numpy's bundled one may both be)."""
    found = []
    for path in loaded_libraries():
        if "openblas" not in os.path.basename(path).lower():
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if _symbol(lib, OPENBLAS_SETTERS) is not None:
            found.append((path, lib))
    return found


def _symbol(lib, names):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def set_blas_threads(threads):
    """Size the thread pool of every OpenBLAS this process has loaded to `threads`.

    OpenBLAS reads OPENBLAS_NUM_THREADS once, when it is loaded, and otherwise starts one
    thread per CPU; a trainer that loads it before it knows --threads (numpy is imported with
    trainers.common) sets it here. Returns the pool sizes the libraries report afterwards."""
    sizes = []
    for _, lib in openblas_libraries():
        _symbol(lib, OPENBLAS_SETTERS)(int(threads))
        getter = _symbol(lib, OPENBLAS_GETTERS)
        if getter is not None:
            sizes.append(int(getter()))
    return sizes


def blas_libraries():
    """The BLAS libraries this process has loaded, as [{library, version, path, threads}]: what it
    is by the symbols it exports (BLAS_MARKERS), the real file it was loaded from (a build's folder
    of links resolved), its version where it says, its thread pool where it has a getter."""
    found = []
    for path in loaded_libraries():
        base = os.path.basename(path).lower()
        if "lapack" in base or not any(word in base for word in BLAS_FILE_WORDS):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if _symbol(lib, ("sgemm_", "sgemm64_", "scipy_sgemm64_", "cblas_sgemm")) is None \
                and _symbol(lib, BLAS_MARKERS[0][1]) is None:
            continue
        entry = _blas_entry(path, lib)
        if not any(e["library"] == entry["library"] and e["version"] == entry["version"] for e in found):
            found.append(entry)
    return found


def _version(getter, version_by):
    """A BLAS's version string from its getter, as BLAS_MARKERS says the getter gives it."""
    if version_by == "buffer":
        buffer = ctypes.create_string_buffer(256)
        getter(buffer, len(buffer) - 1)  # its last byte stays the NUL that ends the text
        text = buffer.value
    else:
        getter.restype = ctypes.c_char_p
        text = getter()
    return text.decode("ascii", "replace").strip()


def _blas_entry(path, lib):
    name, version = "reference", None
    for library, symbols, version_by in BLAS_MARKERS:
        marker = _symbol(lib, symbols)
        if marker is not None:
            name = library
            getter = _symbol(lib, symbols if library == "OpenBLAS" else symbols[:1])
            if version_by and getter is not None:
                version = _version(getter, version_by)
            break
    real = os.path.realpath(path)
    suffix = real.partition(".so.")[2]
    if version is None and "." in suffix:  # a file name with its release (libblas.so.3.11.0), not a soname's 3
        version = suffix
    getter = _symbol(lib, THREAD_GETTERS[name]) if name in THREAD_GETTERS else None
    return {"library": name, "version": version, "path": real, "threads": int(getter()) if getter else None}
