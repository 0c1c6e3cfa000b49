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
