"""The numeric arrays of a MATLAB Level 5 MAT-file (`loadmat`), for the trainer environments that
have no scipy.

SVHN ships its cropped digits as MAT v5 files (train_32x32.mat, test_32x32.mat). Where a trainer
environment has scipy (Caffe's, CNTK's, JAX's) they are read with scipy.io.loadmat; torch's,
TensorFlow's, MXNet's and numpy's have none (adding it to their requirements changes those
environments' hashes, so each is built again, for two files), so they read them here. Both give the same
arrays for SVHN's files: tests/test_cifar100_svhn.py reads files written by scipy.io.savemat
(compressed, as SVHN's are, and not) with both.

What is read, from the format's published description (MathWorks, "MAT-File Format", Level 5):
a 128-byte header whose last two bytes say the byte order ("IM": little-endian); then data
elements, each an 8-byte tag (type, byte count; a "small element" packs both and up to 4 bytes
of data into 8) and its data, padded to 8 bytes; miCOMPRESSED elements hold one zlib-compressed
element; miMATRIX elements hold the array flags (the class), the dimensions, the name and the real
part, in the type it is stored in, as scipy.io.loadmat gives it (MATLAB stores a double array of
small integers as bytes: SVHN's y reads as uint8). Numeric classes only; cells, structs, characters, sparse and complex
arrays are skipped, and a MAT v7.3 file (HDF5) is refused.
"""
import struct
import zlib

import numpy as np

#: MAT data types (the `mi` codes) whose data are numbers, as numpy type codes
_MI_TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
_MI_MATRIX, _MI_COMPRESSED = 14, 15
#: MATLAB array classes (the `mx` codes) of numeric arrays: double, single, int8 ... uint64
_MX_NUMERIC = range(6, 16)
_COMPLEX = 0x0800
HEADER = 128


class MatError(ValueError):
    """A file that is not a MAT v5 file this reader can take; the message says why."""


def loadmat(path):
    """{name: numpy array} of the numeric arrays in the MAT v5 file at `path`, each in the type its
    values are stored in and its shape (column-major), as scipy.io.loadmat gives them."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER:
        raise MatError("%s is %d bytes, shorter than a MAT-file's 128-byte header" % (path, len(raw)))
    order = {b"IM": "<", b"MI": ">"}.get(raw[126:128])
    if raw[:6] == b"\x89HDF\r\n" or raw[512:520] == b"\x89HDF\r\n\x1a\n":
        raise MatError("%s is a MAT v7.3 (HDF5) file; save it as v5 (MATLAB: save -v7)" % path)
    if order is None:
        raise MatError("%s is not a MAT v5 file: no byte-order mark at bytes 126-127" % path)
    try:
        return _arrays(raw, order, path)
    except MatError:
        raise
    except (struct.error, KeyError, IndexError, ValueError) as exc:  # a field too short, an unknown type
        raise MatError("%s is corrupt: %s" % (path, exc))


def _arrays(raw, order, path):
    arrays = {}
    for kind, body in _elements(raw, HEADER, len(raw), order, path, top=True):
        if kind == _MI_COMPRESSED:
            try:
                inner = zlib.decompress(body)
            except zlib.error as exc:
                raise MatError("%s: a compressed element is corrupt (%s)" % (path, exc))
            for kind, body in _elements(inner, 0, len(inner), order, path):
                _matrix(kind, body, order, path, arrays)
        else:
            _matrix(kind, body, order, path, arrays)
    return arrays


def _elements(raw, pos, end, order, path, top=False):
    """(type, data) of each element in raw[pos:end]; a top-level compressed element is not padded."""
    while pos + 8 <= end:
        kind, size = struct.unpack(order + "II", raw[pos:pos + 8])
        if kind >> 16:  # a small element: the byte count in the upper half, the data in the tag
            kind, size = kind & 0xFFFF, kind >> 16
            yield kind, raw[pos + 4:pos + 4 + size]
            pos += 8
            continue
        if pos + 8 + size > end:
            raise MatError("%s is truncated: an element of %d bytes at offset %d runs past the end"
                           % (path, size, pos))
        yield kind, raw[pos + 8:pos + 8 + size]
        pos += 8 + (size if top and kind == _MI_COMPRESSED else -(-size // 8) * 8)


def _matrix(kind, body, order, path, arrays):
    """Add the numeric array an miMATRIX element holds to `arrays` (anything else is skipped)."""
    if kind != _MI_MATRIX or not body:
        return
    parts = list(_elements(body, 0, len(body), order, path))
    if len(parts) < 4:
        return  # an empty array, or not a numeric one
    flags = struct.unpack(order + "I", parts[0][1][:4])[0]
    (dims_kind, dims), (_, name), (data_kind, data) = parts[1], parts[2], parts[3]
    if flags & 0xFF not in _MX_NUMERIC or flags & _COMPLEX or data_kind not in _MI_TYPES:
        return
    shape = tuple(int(d) for d in np.frombuffer(dims, dtype=order + _MI_TYPES[dims_kind]))
    values = np.frombuffer(data, dtype=order + _MI_TYPES[data_kind])
    if values.size != int(np.prod(shape)):
        raise MatError("%s: array %r holds %d values, not the %s its dimensions say"
                       % (path, name.decode("latin-1"), values.size, "x".join(map(str, shape))))
    arrays[name.decode("latin-1")] = values.reshape(shape, order="F")
