"""Array files in the mapped layout: the digest, the block table and the
checks block by block (xmlkit.arrayfile, xmlkit._ext.file_check)."""
import os
import zipfile

import numpy as np
import pytest

import xmlkit
from xmlkit import arrayfile, store
from xmlkit._ext.file_check import (BLOCK, CHILDREN, FINITE, INDICES, POINTERS,
                                    block_digests, xxh64)
from xmlkit.errors import XmlkitError


def test_xxh64_is_the_reference_digest():
    # digests of the reference implementation (the xxhash package, XXH64),
    # seeds 0 and 7: the empty string, short inputs (no stripe), 768 bytes
    # (whole stripes and a tail)
    cases = [(b"", "ef46db3751d8e999", "95f0626f6f0a4409"),
             (b"a", "d24ec4f1a98c6e5b", "dc6349d489e0f965"),
             (b"abc", "44bc2cf5ad770999", "9e755206156676d7"),
             (bytes(range(256)) * 3, "8e03c838c596036f", "b1e10f6c5294cd6b")]
    for data, seed0, seed7 in cases:
        assert xxh64(data) == seed0 and xxh64(data, 7) == seed7
        assert xxh64(memoryview(bytearray(data))) == seed0


def test_block_digests_cover_every_byte():
    data = np.random.default_rng(0).integers(0, 256, 3 * BLOCK + 100, np.uint8).tobytes()
    table = block_digests(data, len(data), BLOCK)
    assert table.dtype == np.uint64 and len(table) == 4
    assert [f"{d:016x}" for d in table] == [xxh64(data[k * BLOCK:(k + 1) * BLOCK])
                                           for k in range(4)]
    assert len(block_digests(data, 0, BLOCK)) == 0


def arrays_file(tmp_path, name="t", **arrays):
    store.save_arrays(tmp_path, name, arrays)
    path = tmp_path / f"{name}.npz"
    return path, arrayfile.digest(path)


def test_mapped_layout(tmp_path):
    """Arrays stored as they are, in the order given, each at a multiple of
    64 bytes, then the block table; numpy.load reads the file; opening it
    maps the arrays (read-only views, no copy)."""
    a = np.arange(100000, dtype=np.float32)
    path, record = arrays_file(tmp_path, b=np.arange(3, dtype=np.int64), a=a)
    names = [i.filename for i in zipfile.ZipFile(path).infolist()]
    assert names == ["b.npy", "a.npy", "__blocks__.npy"]
    assert record["block"] == BLOCK and record["size"] == path.stat().st_size
    f = arrayfile.open_file(path, record)
    assert f.mapped and not f.verified
    assert all(start % 64 == 0 for start, _ in f.spans.values())
    assert np.array_equal(f["a"], a) and not f["a"].flags.writeable
    assert np.array_equal(np.load(path)["a"], a)
    f.verify()
    assert f.verified


def test_the_table_is_the_same_mapped_a_window_at_a_time(tmp_path, monkeypatch):
    """The table is computed over windows of the file (DIGEST_WINDOW bytes
    mapped at a time): with windows of two blocks, a file of several
    windows and a partial last block gets the table of the whole file, and
    opens and verifies."""
    monkeypatch.setattr(arrayfile, "DIGEST_WINDOW", 2 * BLOCK)
    a = np.random.default_rng(1).random(5 * BLOCK // 8 + 99)
    path, record = arrays_file(tmp_path, a=a)
    table = np.load(path)["__blocks__"]
    covered = zipfile.ZipFile(path).getinfo("__blocks__.npy").header_offset
    assert len(table) == -(-covered // BLOCK) >= 6
    assert np.array_equal(table, block_digests(path.read_bytes(), covered, BLOCK))
    f = arrayfile.open_file(path, record)
    f.verify()
    assert f.verified and np.array_equal(f["a"], a)


def test_blocks_are_checked_as_they_are_needed(tmp_path):
    """A BlockFile checks a block's digest and elements the first time bytes
    of it are needed, and only those blocks; a damaged block is refused when
    it is first needed, whoever needs it."""
    n = 5 * BLOCK // 4
    path, record = arrays_file(tmp_path, idx=np.arange(n, dtype=np.int32) % 7,
                               val=np.ones(n, np.float32))
    f = arrayfile.open_file(path, record)
    blocks = f.blocks({"idx": (INDICES, 7), "val": (FINITE, 0)})
    lo, hi = f.spans["idx"]
    assert blocks.need(lo, lo + 4) and blocks.checked <= 2
    assert blocks.check_all() and blocks.checked == len(f.table)
    # an index out of range in the last block of idx (a crafted file: the
    # table is made anew, so only the element check can see it)
    bad = np.arange(n, dtype=np.int32) % 7
    bad[-1] = 7
    path, record = arrays_file(tmp_path, "c", idx=bad, val=np.ones(n, np.float32))
    f = arrayfile.open_file(path, record)
    blocks = f.blocks({"idx": (INDICES, 7), "val": (FINITE, 0)})
    lo, hi = f.spans["idx"]
    assert blocks.need(lo, lo + 4)
    assert not blocks.need(hi - 4, hi) and blocks.failed_block == (hi - 4) // BLOCK
    assert not blocks.need(lo, lo + 4)            # (once failed, the file is refused)
    with pytest.raises(XmlkitError, match="c.npz: damaged model file: block"):
        f.verify({"idx": (INDICES, 7)})


@pytest.mark.parametrize("kind,bound,values,ok", [
    (POINTERS, 5, [0, 2, 5], True), (POINTERS, 5, [0, 6, 5], False),
    (POINTERS, 5, [0, -1, 5], False), (INDICES, 4, [0, 3], True), (INDICES, 4, [4], False),
    (INDICES, 4, [-1], False), (FINITE, 0, [1.0, -3.5], True), (FINITE, 0, [np.nan], False),
    (FINITE, 0, [np.inf], False), (CHILDREN, 3, [[1, 2], [-1, -1], [-1, -1]], True),
    (CHILDREN, 3, [[1, 3], [-1, -1], [-1, -1]], False),
    (CHILDREN, 3, [[0, 2], [-1, -1], [-1, -1]], False),
    (CHILDREN, 3, [[1, -1], [-1, -1], [-1, -1]], False)])
def test_element_checks(kind, bound, values, ok, tmp_path):
    dtype = {POINTERS: np.int64, INDICES: np.int32, FINITE: np.float32,
             CHILDREN: np.int32}[kind]
    path, record = arrays_file(tmp_path, a=np.array(values, dtype))
    f = arrayfile.open_file(path, record)
    assert f.blocks({"a": (kind, bound)}).check_all() == ok


def test_damage_is_refused_where_it_lies(tmp_path):
    """Size and tail (table and directory) are checked when the file is
    opened, and the blocks of the arrays' headers; a damaged data byte when
    its block is checked; a file shorter than its record is never mapped
    past its end."""
    n = 3 * BLOCK
    path, record = arrays_file(tmp_path, a=np.arange(n, dtype=np.float32))
    good = path.read_bytes()
    f = arrayfile.open_file(path, record)
    start, end = f.spans["a"]
    tail = f.covered                # (where the block table's member starts)
    del f

    def opened(data):
        path.write_bytes(data)
        return arrayfile.open_file(path, record)
    for data, says in [(good[:-3], "bytes, the manifest records"),
                       (good + b"\0", "bytes, the manifest records"),
                       (good[:end], "bytes, the manifest records")]:
        with pytest.raises(XmlkitError, match=says):
            opened(data)
    for at in (start - 20, tail + 40, len(good) - 30):     # a header, the tail
        data = bytearray(good)
        data[at] ^= 1
        with pytest.raises(XmlkitError, match="damaged model file"):
            opened(bytes(data))
    data = bytearray(good)
    data[end - 5] ^= 1
    f = opened(bytes(data))                       # (a data block: checked when needed)
    blocks = f.blocks()
    assert blocks.need(start, start + 4) and not blocks.need(end - 4, end)
    with pytest.raises(XmlkitError, match="block"):
        f.verify()


def resident_kb(path):
    """KB of `path`'s mapped pages resident in this process (Linux smaps)."""
    total, current = 0, False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0] and ":" in fields[3]:
            current = len(fields) > 5 and fields[5] == str(path)
        elif current and line.startswith("Rss:"):
            total += int(fields[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"),
                    reason="resident pages are read from Linux's /proc/self/smaps")
def test_opening_a_file_leaves_its_header_blocks_out_of_memory(tmp_path):
    """Opening checks the blocks around each array's header (a block or two
    each: here every block of the file), then lets them go: a model of many
    files opened at once holds none of them until its arrays are read."""
    arrays = {f"a{i}": np.full(BLOCK // 4, i, np.float32) for i in range(12)}
    path, record = arrays_file(tmp_path, **arrays)
    f = arrayfile.open_file(path, record)
    assert len(f.table) >= 12
    assert resident_kb(path.resolve()) <= 8          # (a page or two: the file is 768 KB)
    assert float(f["a5"][0]) == 5 and resident_kb(path.resolve()) > 0


def test_one_row_checks_the_blocks_it_reads(bibtex, tmp_path):
    """Predicting one row from a loaded folder checks the blocks of the
    nodes it visits (fewer than the files hold), verify() every block; the
    scores are the fitted model's."""
    X, Y, Xt, _ = bibtex
    fitted = xmlkit.FastXML(n_trees=4).fit(X, Y)
    fitted.save(tmp_path / "m")
    m = xmlkit.load_model(tmp_path / "m")
    total = sum(len(t.file.table) for t in m.trees_.values())
    assert (m.predict(Xt[:1]) != fitted.predict(Xt[:1])).nnz == 0
    checked = sum(t.blocks.checked for t in m.trees_.values())
    assert 0 < checked < total
    m.verify(threads=2)
    assert sum(t.blocks.checked for t in m.trees_.values()) == total
    assert (m.predict(Xt, threads=2) != fitted.predict(Xt)).nnz == 0


def test_a_damaged_block_stops_a_prediction(bibtex, tmp_path):
    """A byte of a tree's weights changed (the record left as it was): the
    folder opens (the block is not read), and the prediction that reads the
    block raises XmlkitError naming the file, as does verify()."""
    X, Y, Xt, _ = bibtex
    xmlkit.FastXML(n_trees=2).fit(X, Y).save(tmp_path / "m")
    path = tmp_path / "m" / "tree_00001.npz"
    f = arrayfile.open_file(path)
    lo, hi = f.spans["w_val"]
    del f
    data = bytearray(path.read_bytes())
    data[(lo + hi) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    m = xmlkit.load_model(tmp_path / "m")
    with pytest.raises(XmlkitError, match="tree_00001.npz: damaged model file"):
        m.predict(Xt, threads=2)
    with pytest.raises(XmlkitError, match="tree_00001.npz: damaged model file"):
        xmlkit.load_model(tmp_path / "m").verify()


def test_damaged_headers_and_archives_are_refused_not_raised(tmp_path):
    """What the long fuzzer run found (make -C scripts fuzz): an array header
    whose dict is cut (numpy's tokenizer raises TokenError), a directory that
    asks for a zip version nobody reads (NotImplementedError): DamagedModel,
    whether the file is opened, recorded or read as a featurizer."""
    from xmlkit.text import load_featurizer
    opened = (arrayfile.open_file, load_featurizer)
    for name, damage, reads in (
            ("header", lambda b: b.replace(b"), }", b"), (", 1), opened),
            ("version", lambda b: _directory_version(b, 78), (*opened, arrayfile.digest))):
        path, _ = arrays_file(tmp_path, name, a=np.arange(10, dtype=np.int64))
        path.write_bytes(damage(path.read_bytes()))
        for read in reads:
            with pytest.raises(XmlkitError):
                read(path)


def _directory_version(data, version):
    """`data` with the version needed to extract of every central-directory
    entry set to `version`."""
    data = bytearray(data)
    i = data.find(b"PK\x01\x02")
    while i >= 0:
        data[i + 6] = version
        i = data.find(b"PK\x01\x02", i + 4)
    return bytes(data)
