"""A data file's bytes: its format and compression by name, read decompressed in chunks or lines, its line breaks
counted as editors count them, checked as UTF-8 and for paragraphs; the answer of a check that reads the whole file kept
for the unchanged file (`once`); its first bytes (`head`); what its first line says of a file of no known suffix
(`first_line_advice`: WikiExtractor's --json output)."""

from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import io
import json
import lzma
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from train.data.errors import DataError, InvalidUTF8Error
from train.data.fingerprints import file_fingerprint
from train.data.tokenization import cache_folder

FORMATS = {".txt": "text", ".text": "text", ".raw": "text", ".jsonl": "json", ".json": "json", ".csv": "csv",
           ".tsv": "csv", ".parquet": "parquet"}  # .raw: WikiText's wiki.train.raw, ...


COMPRESSIONS = {".gz": ("gzip", b"\x1f\x8b"), ".bz2": ("bzip2", b"BZh"), ".xz": ("xz", b"\xfd7zXZ\x00"),
                ".zst": ("zstandard", b"\x28\xb5\x2f\xfd")}  # suffix -> (format, the bytes its files start with)


def suffix(path: Path) -> str:
    """The suffix that names the file's format, lowercased, before a compression's (`a.CSV.gz`: `.csv`)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def compression(path: Path) -> tuple[str, bytes] | None:
    """(format, signature) of a compressed file, by its last suffix; None for an uncompressed one."""
    return COMPRESSIONS.get(path.suffix.lower())


def check_signature(path: Path) -> None:
    """A compressed file must start with its format's signature (random bytes named ``a.txt.gz`` do not)."""
    name, signature = compression(path)
    with open(path, "rb") as handle:
        if handle.read(len(signature)) != signature:
            raise DataError(f"{path}: not a valid {name} file (it does not start with the {name} signature "
                            f"{signature.hex(' ')}); compress it again, or name it by its real format")


def _open_bytes(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when its suffix names a compression."""
    suffix = path.suffix.lower()
    if suffix == ".zst":
        try:
            import zstandard
        except ImportError:
            raise DataError(f"{path}: reading .zst files needs the package zstandard: pip install zstandard") from None
        return zstandard.open(path, "rb")
    return {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(suffix, open)(path, "rb")


def chunks(path: Path, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """The file's (decompressed) bytes in chunks; a compressed file that cannot be read to its end (truncated,
    corrupt) raises a ``DataError`` naming it."""
    compressed = compression(path)
    with _open_bytes(path) as handle:
        try:
            while chunk := handle.read(chunk_size):
                yield chunk
        except Exception as err:  # whatever the decompressor raises: OSError, EOFError, LZMAError, ZstdError
            if compressed is None:
                raise
            raise DataError(f"{path}: not a valid {compressed[0]} file ({err or type(err).__name__}); it may be "
                            f"truncated: copy or compress it again") from None


def _line_breaks(data: bytes, after_cr: bool = False) -> int:
    """The line breaks in `data` as datasets' text reader (Python's universal newlines) and editors count them: `\n`,
    `\r\n` and a lone `\r`; `after_cr`: the bytes before `data` ended with `\r`, so a `\n` first ends that break."""
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n") - (after_cr and data.startswith(b"\n"))


def check_utf8(path: Path, chunk_size: int = 1 << 20) -> bool:
    """Raise ``InvalidUTF8Error`` naming the line of the first invalid byte (of the decompressed text, for a
    compressed file); return whether the file holds any non-whitespace text."""
    decoder, line, content, after_cr = codecs.getincrementaldecoder("utf-8")(), 1, False, False
    for chunk in chunks(path, chunk_size):
        try:
            text = decoder.decode(chunk)
        except UnicodeDecodeError as err:
            at = min(err.start, len(chunk) - 1)  # the decoder may hold up to 3 bytes of the last chunk
            bad_line = line + _line_breaks(chunk[:at], after_cr)
            raise InvalidUTF8Error(
                f"{path}: line {bad_line}: not valid UTF-8 "
                f"(byte 0x{chunk[at]:02x}: {err.reason}); re-encode the file as UTF-8") from None
        line += _line_breaks(chunk, after_cr)
        after_cr = chunk.endswith(b"\r")
        content = content or bool(text.strip())
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise InvalidUTF8Error(f"{path}: line {line}: not valid UTF-8 (truncated character at the end)") from None
    return content


_LINE_BREAK = re.compile(rb"\r\n|\r|\n")  # as `_line_breaks` counts them


def _lines(path: Path) -> Iterator[bytes]:
    """The file's (decompressed) lines, without their line breaks (`_line_breaks`)."""
    rest = b""
    for chunk in chunks(path):
        data = rest + chunk
        held = data.endswith(b"\r")  # perhaps the start of a \r\n
        *lines, rest = _LINE_BREAK.split(data[:-1] if held else data)
        rest += b"\r" if held else b""
        yield from lines
    yield from _LINE_BREAK.split(rest)


def has_paragraphs(path: Path) -> bool:
    """Whether an empty line separates two lines of text (BERT's layout: a blank line between documents)."""
    text_seen = gap = False
    for line in _lines(path):
        if line.strip():
            if gap:
                return True
            text_seen = True
        gap = gap or (text_seen and not line)
    return False


def once(path: Path, check: str, compute: Callable[[], bool]) -> bool:
    """``compute()``, a check that reads the whole file, or its answer kept for the same unchanged file (path and
    content fingerprint) in ``cache_folder()/checked``. A check that raises is not kept."""
    key = hashlib.sha256(f"{path.resolve()} {file_fingerprint(path)} {check}".encode()).hexdigest()[:24]
    record = cache_folder(writing=True) / "checked" / key
    if record.is_file():
        return record.read_text() == "true"
    answer = compute()
    record.parent.mkdir(parents=True, exist_ok=True)
    staging = record.with_name(f".{key}.tmp-{os.getpid()}")
    staging.write_text("true" if answer else "false")
    os.replace(staging, record)
    return answer


def head(path: Path, size: int = 4096) -> bytes:
    """The (decompressed) file's first `size` bytes; none where it cannot be read (the reader's failure names it)."""
    try:
        with _open_bytes(path) as handle:
            return handle.read(size)
    except Exception:  # whatever the decompressor raises (ZstdError, LZMAError, EOFError, OSError)
        return b""


def has_bom(path: Path) -> bool:
    """Whether the (decompressed) file starts with UTF-8's byte order mark."""
    return head(path, 3) == codecs.BOM_UTF8


def text_lines(path: Path) -> Iterator[str]:
    """The lines of a (compressed) text file as datasets' `text` reader splits them (universal newlines, no BOM); a
    byte that is no UTF-8 or a truncated file is refused naming the file and line (`check_utf8`)."""
    try:
        with io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig") as handle:
            for line in handle:
                yield line.removesuffix("\n")
    except Exception:  # whatever the decoder or decompressor raises
        check_utf8(path)
        raise


def first_line(path: Path) -> str | None:
    """The file's first line (decompressed), stripped; None where it is no text."""
    try:
        return next(text_lines(path), "").strip()
    except Exception:  # whatever a file that is no text raises: the checks of its format name it
        return None


def jsonl_name(path: Path) -> str:
    """The name that reads `path` as JSON Lines: its text format's suffix, if any, replaced by `.jsonl`, before its
    compression's (`wiki_00`: wiki_00.jsonl; `wiki_00.bz2`: wiki_00.jsonl.bz2; `wiki_00.txt.gz`: wiki_00.jsonl.gz)."""
    packed = compression(path) is not None
    base = Path(path.stem) if packed else path
    return f"{base.stem if base.suffix.lower() in FORMATS else base.name}.jsonl{path.suffix if packed else ''}"


def first_line_advice(path: Path) -> str | None:
    """How to read a file of no known suffix, by its first line: a JSON object per line (WikiExtractor's `--json`
    output, `AA/wiki_00`, ...); None for anything else."""
    named = jsonl_name(path)
    first = first_line(path)
    try:
        is_object = first is not None and first.startswith("{") and isinstance(json.loads(first), dict)
    except ValueError:
        is_object = False
    return f"its first line is a JSON object: name it {named} to read a JSON object per line" if is_object else None


__all__ = ["COMPRESSIONS", "FORMATS", "check_signature", "check_utf8", "chunks", "compression", "first_line",
           "first_line_advice", "has_bom", "has_paragraphs", "head", "jsonl_name", "once", "suffix", "text_lines"]
