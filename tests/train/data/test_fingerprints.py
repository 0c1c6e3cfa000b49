"""Content fingerprints (issue 38): a file's fingerprint follows its bytes, not its modification time; an edit anywhere
in a file of up to two spans, or in the first or last span of a larger one, changes it, and (the documented limit) an
edit between those spans that keeps the size does not."""

import os
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from train.data import fingerprints
from train.data.fingerprints import file_fingerprint, files_digest

EXAMPLES = settings(max_examples=60, deadline=None, database=None, derandomize=True)
SPAN = 64  # the span in these tests: the property is the same at 1 MiB, the files are smaller


@EXAMPLES
@given(data=st.data(), size=st.integers(1, 5 * SPAN))
def test_an_edit_keeping_size_and_mtime_changes_the_fingerprint_unless_it_lies_between_the_spans(tmp_path_factory,
                                                                                              data, size):
    path = tmp_path_factory.mktemp("fingerprint") / "corpus.txt"
    content = bytes(data.draw(st.lists(st.integers(0, 255), min_size=size, max_size=size)))
    at = data.draw(st.integers(0, size - 1))
    with mock.patch.object(fingerprints, "SPAN", SPAN):
        path.write_bytes(content)
        kept = os.stat(path)
        before = file_fingerprint(path)
        path.write_bytes(content[:at] + bytes([content[at] ^ 0xFF]) + content[at + 1:])
        os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
        assert os.stat(path).st_mtime_ns == kept.st_mtime_ns and os.stat(path).st_size == kept.st_size
        seen = size <= 2 * SPAN or at < SPAN or at >= size - SPAN
        assert (file_fingerprint(path) != before) == seen
        assert file_fingerprint(path).startswith(f"{size}:")


def test_the_fingerprint_is_of_the_bytes_alone_and_a_digest_follows_every_file(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("the same text\n")
    b.write_text("the same text\n")
    os.utime(b, (1, 1))
    assert file_fingerprint(a) == file_fingerprint(b)
    assert files_digest([a, b]) != files_digest([a])
    before = files_digest([a, b])
    b.write_text("the same text!\n")
    assert files_digest([a, b]) != before


def test_a_process_reads_a_settled_file_once_and_again_once_it_is_rewritten_with_its_size_and_mtime(tmp_path,
                                                                                                  monkeypatch):
    monkeypatch.setattr(fingerprints, "_SEEN", {})
    monkeypatch.setattr(fingerprints, "SETTLED_NS", -1)  # every file counts as settled, as a corpus written earlier
    reads = mock.Mock(wraps=fingerprints._read_fingerprint)
    monkeypatch.setattr(fingerprints, "_read_fingerprint", reads)
    path = tmp_path / "corpus.txt"
    path.write_text("the text\n")
    kept = os.stat(path)
    before = file_fingerprint(path)
    assert file_fingerprint(tmp_path / "." / "corpus.txt") == before and files_digest([path]) == files_digest([path])
    assert reads.call_count == 1
    path.write_text("the TEXT\n")
    while os.stat(path).st_ctime_ns == kept.st_ctime_ns:  # the rewrite's ctime tick is past the first write's
        os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns + 1))
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (kept.st_size, kept.st_mtime_ns)
    assert file_fingerprint(path) != before and reads.call_count == 2


def test_a_file_changed_within_the_settled_time_is_read_at_every_call(tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprints, "_SEEN", {})
    reads = mock.Mock(wraps=fingerprints._read_fingerprint)
    monkeypatch.setattr(fingerprints, "_read_fingerprint", reads)
    path = tmp_path / "corpus.txt"
    path.write_text("the text\n")
    assert file_fingerprint(path) == file_fingerprint(path) and reads.call_count == 2
