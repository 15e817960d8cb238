"""The array files of model folders: NumPy ``.npz`` files (zip archives of
``.npy`` arrays; nothing pickled, numpy.load reads them) in two layouts.

- **mapped** (written by default): every array stored uncompressed, its data
  at a multiple of 64 bytes in the file, so that a reader maps the file and
  uses the arrays where they lie: nothing is copied or decoded, and threads,
  processes and Dask workers on one machine share the page cache's copy.
- **compact**: deflated, read by decompressing into memory (the layout of
  folders written before the mapped one, and `compact=True`).

Checking. A mapped file ends with one more array, `__blocks__`: the XXH64
digest of each BLOCK (64 KiB) of the bytes before it. Its record in the
manifest is its size and the digest of its tail (that table and the
archive's directory). Opening it (`open_file`) checks its size (so that no
array is read past the end of a truncated file), the tail's digest, and the
blocks that hold the arrays' headers: a few blocks, whatever the file's
size. The blocks of the arrays' data are checked the first time a reader
needs them (xmlkit._ext.file_check.BlockFile: digest, then each element
against what a kernel needs: pointers and indices in range, finite values,
child links), without the GIL, on the thread that needs them: a forest
predicting one document checks the blocks of the nodes it visits; `verify`
checks every block. A compact file is read whole when opened, and checked
against its record (XXH64 or, in folders written before, SHA-256 of the
whole file) then.
"""
import io
import mmap
import os
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from xmlkit.atomic import atomic_path
from xmlkit.checks import DamagedModel
from xmlkit.errors import XmlkitError

try:        # Python's own SHA-256 (the records of folders written before format
    from _sha2 import sha256            # version 3, and PfastreXML's record of
except ImportError:                     # its propensities): loading OpenSSL's
    try:                                # (hashlib) costs every process memory
        from _sha256 import sha256      # (Python < 3.12)
    except ImportError:
        from hashlib import sha256

#: byte alignment of every array's data in a mapped file
ALIGN = 64
#: the last array of a mapped file: its block digests
TABLE = "__blocks__"
#: zip extra-field id of the padding that aligns a member's data ("xk")
PAD_ID = 0x6B78
#: entry kinds a file's arrays may hold (no objects, nothing pickled)
_KINDS = "biufU"
_LOCAL = struct.Struct("<4s5H3L2H")      # a zip member's local header (30 bytes)
#: what reading a damaged archive or .npy header may raise (zipfile: an
#: unknown zip version; numpy parses the header's dict with Python's
#: tokenizer: a cut header is a TokenError, a crafted one a TypeError or
#: a RecursionError)
UNREADABLE = (ValueError, OSError, EOFError, KeyError, IndexError, TypeError, OverflowError,
              NotImplementedError, RecursionError, MemoryError, zipfile.BadZipFile, zlib.error,
              struct.error, SyntaxError, tokenize.TokenError)


class Uncompressed:
    """An entry of `write`'s arrays that a compact file stores without
    compression (bytes deflate shrinks little, for much time)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array


# -- writing

def write(folder, name, arrays, compact=False, remove_dead=False, suffix=".npz"):
    """Write `<folder>/<name><suffix>` atomically: the arrays in the order of the
    dict `arrays` (mapped layout) or sorted by name (compact). An entry may be
    a function giving its array, called when its entry is written (and the
    array let go before the next: arrays made for the file alone are held
    one at a time). The entries carry a fixed date, so the same arrays give
    the same bytes. Compact files are deflated at level 1 (an Uncompressed
    entry stored); dead temporary files are left to the folder's cleaning
    unless remove_dead (atomic_path's)."""
    with atomic_path(Path(folder) / f"{name}{suffix}", remove_dead=remove_dead) as tmp:
        with open(tmp, "w+b") as f, zipfile.ZipFile(f, "w") as zf:
            keys = sorted(arrays) if compact else list(arrays)
            if TABLE in keys:
                raise ValueError(f"{TABLE} is the name of a mapped file's own table")
            for key in keys:
                a = arrays[key]
                stored = not compact or isinstance(a, Uncompressed)
                if isinstance(a, Uncompressed):
                    a = a.array
                _write_member(zf, f, key, np.asarray(a() if callable(a) else a), stored,
                              aligned=not compact)
                a = None
            if not compact:
                f.flush()
                _write_member(zf, f, TABLE, _file_digests(f, f.tell()), True, aligned=True)


#: bytes of a file mapped at a time while its digests are computed: a large
#: file is not all resident at once (a multiple of the digest block and of
#: every system's mapping granularity)
DIGEST_WINDOW = 1 << 22


def _file_digests(f, covered):
    """The table of open file f's first `covered` bytes (block_digests),
    mapped a window at a time."""
    from xmlkit._ext.file_check import BLOCK, block_digests
    tables = [block_digests(b"", 0, BLOCK)]
    for lo in range(0, covered, DIGEST_WINDOW):
        n = min(DIGEST_WINDOW, covered - lo)
        with mmap.mmap(f.fileno(), n, access=mmap.ACCESS_READ, offset=lo) as m:
            tables.append(block_digests(m, n, BLOCK))
    return np.concatenate(tables)


def _write_member(zf, f, key, a, stored, aligned):
    """Write array `a` as member key.npy of zip archive zf (on file f):
    stored (aligned: its data at a multiple of ALIGN) or deflated."""
    if a.dtype.hasobject:
        raise ValueError(f"{key}: object arrays are not stored")
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    header = _npy_header(a)
    info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
    info.file_size = len(header) + a.nbytes
    if stored:
        info.compress_type = zipfile.ZIP_STORED
        if aligned:
            info.extra = _padding(f.tell(), info)
    else:
        info.compress_type = zipfile.ZIP_DEFLATED
        try:
            info.compress_level = 1         # Python >= 3.13
        except AttributeError:
            info._compresslevel = 1
    with zf.open(info, "w", force_zip64=info.file_size > 0x7FFFFFFF) as out:
        out.write(header)
        if a.nbytes:
            out.write(memoryview(a.reshape(-1)).cast("B"))


def _npy_header(a):
    """The .npy header of array a (numpy's, padded to 64 bytes)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(a))
    return buf.getvalue()


def _padding(offset, info):
    """The extra field that puts a member's data, whose local header starts
    at `offset`, at a multiple of ALIGN (zipfile adds 20 bytes of zip64
    extra to the local header of a member of 2 GiB or more)."""
    fixed = 30 + len(info.filename.encode()) + (20 if info.file_size > 0x7FFFFFFF else 0)
    pad = -(offset + fixed) % ALIGN
    if pad and pad < 4:
        pad += ALIGN            # (an extra field is at least its 4-byte head)
    return struct.pack("<HH", PAD_ID, pad - 4) + bytes(pad - 4) if pad else b""


def digest(path):
    """A file's record in a manifest: {"size", "xxh64", "block"} of a mapped
    file (the digest of its tail: see the module doc), {"size", "xxh64"} of
    another (the digest of the whole file)."""
    from xmlkit._ext.file_check import BLOCK, xxh64
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return {"size": 0, "xxh64": xxh64(b"")}
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
            members = _members(m, path)
            if TABLE in members:
                tail = members[TABLE][4]
                return {"size": size, "xxh64": xxh64(m[tail:]), "block": BLOCK}
            return {"size": size, "xxh64": xxh64(m)}


def record_matches(record, data):
    """Whether the bytes `data` of a compact file match its record {"size",
    "xxh64" or "sha256"}."""
    if len(data) != record["size"] or "block" in record:
        return False
    if "xxh64" in record:
        from xmlkit._ext.file_check import xxh64
        return xxh64(data) == record["xxh64"]
    return sha256(data).hexdigest() == record["sha256"]


# -- reading

def copied(arrays):
    """The arrays of an opened file (open_file) copied into the process, as
    a dict: a mapped file changed while in use then cannot reach them."""
    return {k: np.array(a) for k, a in arrays.items()}


def open_file(path, record=None):
    """The ArrayFile (mapped layout) or CompactFile of `path`, checked against
    `record` (None: no record) as the module doc says."""
    from xmlkit.io import opened
    path = Path(path)
    with opened(path, missing="missing from the model folder", kind="a model file") as f:
        size = os.fstat(f.fileno()).st_size
        if record is not None and size != record["size"]:
            raise DamagedModel(path, f"{size} bytes, the manifest records {record['size']} "
                                "(truncated, grown or replaced)")
        if size == 0:
            raise DamagedModel(path, "empty file")
        try:
            data = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise XmlkitError(f"{path}: cannot be read ({exc})") from None
    members = _members(data, path)
    if TABLE in members:
        from xmlkit._ext.file_check import mapped_folder
        mapped_folder(str(path.parent))     # (named if it is cut short in use: file_check)
        return ArrayFile(path, record, data, members)
    if record is not None and "block" in record:
        raise DamagedModel(path, "it is not the mapped file the manifest records")
    # a compact file: checked now, as it is read whole
    raw = bytes(data)
    data.close()
    if record is not None and not record_matches(record, raw):
        raise DamagedModel(path, "its digest differs from the manifest's record")
    return CompactFile(path, raw)


def _members(data, path):
    """name (without .npy) -> (data offset, compress type, stored size,
    size, local header offset) of the archive's members, read from its
    central directory."""
    try:
        with zipfile.ZipFile(data) as zf:
            infos = zf.infolist()
    except UNREADABLE as exc:
        raise DamagedModel(path, f"not a readable .npz archive ({exc})") from None
    out = {}
    size = len(data)
    for info in infos:
        if not info.filename.endswith(".npy") or info.filename[:-4] in out:
            raise DamagedModel(path, f"unexpected archive member {info.filename!r}")
        off = info.header_offset
        if not 0 <= off <= size - _LOCAL.size:
            raise DamagedModel(path, f"member {info.filename} lies outside the file")
        head = _LOCAL.unpack_from(data, off)
        if head[0] != b"PK\x03\x04":
            raise DamagedModel(path, f"member {info.filename} has no local header")
        start = off + _LOCAL.size + head[9] + head[10]
        if start + info.compress_size > size:
            raise DamagedModel(path, f"member {info.filename} reaches past the end of the file")
        out[info.filename[:-4]] = (start, info.compress_type, info.compress_size,
                                   info.file_size, off)
    return out


class ArrayFile(Mapping):
    """A mapped array file: name -> a read-only array over the file's pages
    (no copy). `spans[name]` = (start, end) of an array's data in the file.
    Opening checks the size, the tail's digest and the arrays' headers (see
    the module doc); an array's data must not reach a kernel before its
    blocks are checked: by a BlockFile of `blocks(checks)` as the kernel
    needs them, or by `verify` (all of them)."""

    mapped = True

    def __init__(self, path, record, data, members):
        from xmlkit._ext.file_check import BLOCK, xxh64
        self.path, self.record, self._data = Path(path), record, data
        start, kind, stored, size, tail = members.pop(TABLE)
        if any(m[4] > tail for m in members.values()):
            raise DamagedModel(self.path, f"{TABLE} is not its last array")
        if record is not None and (record.get("block") != BLOCK
                                   or xxh64(data[tail:]) != record.get("xxh64")):
            raise DamagedModel(self.path, "its digest differs from the manifest's record")
        if kind != zipfile.ZIP_STORED or stored != size:
            raise DamagedModel(self.path, f"{TABLE} is not stored")
        self.table, _ = _mapped_array(data, start, size, f"{self.path} ({TABLE})")
        self.covered = tail
        if self.table.dtype != np.uint64 or self.table.shape != (-(-tail // BLOCK),):
            raise DamagedModel(self.path, f"{TABLE} does not cover the file")
        self._arrays, self.spans = {}, {}
        headers = set()
        for name, (start, kind, stored, size, local) in members.items():
            if kind != zipfile.ZIP_STORED or stored != size:
                raise DamagedModel(self.path, f"member {name}.npy is not stored")
            a, begin = _mapped_array(data, start, size, f"{self.path} ({name})")
            if begin + a.nbytes > tail:
                raise DamagedModel(self.path, f"{name} overlaps the block table")
            self._arrays[name] = a
            self.spans[name] = (begin, begin + a.nbytes)
            headers.update(range(local // BLOCK, (begin - 1) // BLOCK + 1))
        # the blocks of the archive's and the arrays' headers (a few, whatever
        # the file's size): what the arrays above were read by
        for k in sorted(headers):
            self._check_block(k, "array headers")
        self._all = None
        # (those checks read a block or two around each member's header; let
        # them go, so a model of many files opened at once does not hold
        # them all until each file's arrays are used)
        self.release()

    def _check_block(self, k, what):
        """Raise DamagedModel unless block k's bytes have the table's digest
        (`what` the block holds names it in the message)."""
        from xmlkit._ext.file_check import BLOCK, block_digests
        lo, hi = k * BLOCK, min(self.covered, (k + 1) * BLOCK)
        if block_digests(self._data[lo:hi], hi - lo, BLOCK)[0] != self.table[k]:
            raise DamagedModel(self.path, f"block {k} ({what}) differs from its digest")

    def __getitem__(self, name):
        return self._arrays[name]

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self):
        return len(self._arrays)

    @property
    def verified(self):
        return self._all is not None and self._all.checked == len(self.table)

    def blocks(self, checks=None):
        """A BlockFile checking this file's blocks as they are needed, and
        the elements of the arrays named in `checks` (name -> (kind, bound):
        see xmlkit._ext.file_check)."""
        from xmlkit._ext.file_check import BLOCK, CHILDREN, BlockFile
        checks = checks or {}
        unknown = sorted(set(checks) - set(self._arrays))
        if unknown:
            raise DamagedModel(self.path, f"lacks arrays {unknown}")
        regions = []
        for n, (kind, bound) in checks.items():
            a = self._arrays[n]
            itemsize = 8 if kind == CHILDREN else a.dtype.itemsize
            if a.dtype.itemsize not in (4, 8) or (kind == CHILDREN and a.shape[1:] != (2,)):
                raise DamagedModel(self.path, f"{n} holds {a.dtype} values")
            regions.append((*self.spans[n], kind, itemsize, bound))
        try:
            return BlockFile(self._data, self.table, self.covered, BLOCK, regions)
        except ValueError as exc:
            raise DamagedModel(self.path, str(exc)) from None

    def take(self, name):
        """Array `name` (None if the file has none), checked now (its blocks)
        and copied, and no longer one of the file's arrays (a small array a
        caller checks the file by: store.check_origin)."""
        from xmlkit._ext.file_check import BLOCK
        a = self._arrays.pop(name, None)
        if a is None:
            return None
        begin, end = self.spans.pop(name)
        for k in range(begin // BLOCK, (max(end, begin + 1) - 1) // BLOCK + 1):
            self._check_block(k, name)
        return np.array(a)

    def failure(self, blocks):
        """The DamagedModel error of a BlockFile whose check failed."""
        from xmlkit._ext.file_check import BLOCK
        k = blocks.failed_block
        if k is None:       # (every block passed: a kernel found an index out of range)
            return DamagedModel(self.path, "an index out of range where it is used: the file "
                                           "changed after it was checked (in use)")
        where = [n for n, (a, b) in self.spans.items() if a < (k + 1) * BLOCK and b > k * BLOCK]
        return DamagedModel(self.path, f"block {k} ({', '.join(where) or 'headers'}) differs from "
                                  "its digest or holds values it cannot hold")

    def verify(self, checks=None):
        """Check every block of the file, and the elements of the arrays in
        `checks` (see blocks); raise DamagedModel naming what failed."""
        blocks = self.blocks(checks)
        if not blocks.check_all():
            raise self.failure(blocks)
        self._all = blocks

    def release(self):
        """Let the pages read so far go from this process's memory (they stay
        in the page cache; read again if needed)."""
        try:
            self._data.madvise(mmap.MADV_DONTNEED)
        except (AttributeError, OSError, ValueError):
            pass


def _mapped_array(data, start, size, name):
    """The array of a stored .npy member (bytes start..start+size of the
    file): a view of the file's bytes; its header is checked against them."""
    fmt = np.lib.format
    try:
        f = io.BytesIO(data[start:start + min(size, 1 << 16)])
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"npy format {version}")
    except UNREADABLE as exc:
        raise DamagedModel(name, f"unreadable array header ({exc})") from None
    begin = start + f.tell()
    count = 1
    for n in shape:
        count *= n
    if dtype.kind not in _KINDS or dtype.hasobject or not dtype.isnative and \
            dtype.byteorder not in "|=":
        raise DamagedModel(name, f"arrays of {dtype} are not read")
    if fortran and len(shape) > 1:
        raise DamagedModel(name, "stored in Fortran order")
    if begin + count * dtype.itemsize != start + size:
        raise DamagedModel(name, f"its header says {shape} {dtype}, which is not the "
                                 f"{size - (begin - start)} bytes it holds")
    if begin % min(dtype.itemsize, 8):
        raise DamagedModel(name, "the array's data are not aligned")
    a = np.frombuffer(data, dtype=dtype, count=count, offset=begin)
    return a.reshape(shape), begin


class CompactFile(Mapping):
    """An array file held in memory (a compact file, checked against its
    record when read): each array decompressed whenever it is looked up, and
    not kept, so that a reader that takes one at a time and lets it go
    holds the file's bytes and one array."""

    mapped = False
    verified = True

    def __init__(self, path, raw):
        self.path = Path(path)
        try:
            self._z = np.load(io.BytesIO(raw), allow_pickle=False)
            self._names = tuple(self._z.files)
        except UNREADABLE as exc:
            raise self._damaged(exc) from None

    def _damaged(self, exc):
        return XmlkitError(f"{self.path}: unreadable, damaged model file ({exc})")

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(name)
        try:
            return self._z[name]
        except UNREADABLE as exc:
            raise self._damaged(exc) from None

    def take(self, name):
        """Array `name` (None if the file has none), no longer one of the
        file's arrays (see ArrayFile.take)."""
        if name not in self._names:
            return None
        a = self[name]
        self._names = tuple(n for n in self._names if n != name)
        return a

    def read_npy(self, name):
        """Array `name` as (shape, dtype, read): its header, and read(k)
        giving its next k bytes of data (fewer at the end), for a reader
        that decodes it a piece at a time instead of holding it whole."""
        if name not in self._names:
            raise KeyError(name)
        fmt = np.lib.format
        try:
            f = self._z.zip.open(f"{name}.npy")
            version = fmt.read_magic(f)
            shape, fortran, dtype = (fmt.read_array_header_1_0(f) if version == (1, 0)
                                     else fmt.read_array_header_2_0(f))
        except UNREADABLE as exc:
            raise self._damaged(exc) from None
        if fortran and len(shape) > 1:
            raise self._damaged(f"{name} is stored in Fortran order")

        def read(k):
            try:
                return f.read(k)
            except UNREADABLE as exc:
                raise self._damaged(exc) from None
        return shape, dtype, read

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)
