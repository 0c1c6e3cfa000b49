"""The errors that refuse bad data: `DataError` (a `ValueError`) and its kinds, and `DataFileNotFoundError` (a
`FileNotFoundError`). docs/reliability.md, "Bad inputs"."""

from __future__ import annotations


class DataError(ValueError):
    """Bad data: the message names the file, the line or row, and the problem."""


class DataFileNotFoundError(FileNotFoundError):
    """A data file or folder that does not exist."""


class EmptyDataFileError(DataError):
    """A data file with no rows."""


class MissingColumnError(DataError):
    """A column the task needs is absent, or a row has no value in it."""


class UnknownColumnError(MissingColumnError):
    """A column the task needs is not in the data at all (the caller adds which keys name the columns); `column`
    names it where known."""

    def __init__(self, message: str, column: str | None = None):
        super().__init__(message)
        self.column = column


class UnknownSplitError(DataError):
    """A split the dataset does not have (the caller adds which key names it)."""


class InvalidUTF8Error(DataError):
    """A text file that is not valid UTF-8."""


class MalformedRowError(DataError):
    """A row that cannot be parsed (e.g. a JSON line that is not a JSON object)."""


__all__ = ["DataError", "DataFileNotFoundError", "EmptyDataFileError", "InvalidUTF8Error", "MalformedRowError",
           "MissingColumnError", "UnknownColumnError", "UnknownSplitError"]
