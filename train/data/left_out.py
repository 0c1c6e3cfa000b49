"""A stream's filter that counts the rows it leaves out as it reads them, for results.json with no read back from the
device: copies of held-out rows (`train.setup.splits`), rows `skip_unlabeled` skips (`train.data.labels`)."""

from __future__ import annotations

from collections.abc import Callable


class RowsLeftOut:
    """`keep` filters by `keeps` (a batch -> whether each row is kept), noting the rows left out and the runs read
    (`spans`): `row_of` finds the stream's row of a row kept, `count` those left out from row `first` on."""

    def __init__(self, keeps: Callable[[dict], list[bool]], shards: int, first: int = 0):
        self.keeps, self.shards, self.first, self.left_out, self.spans = keeps, shards, first, set(), []

    def keep(self, batch: dict, indices: list[int]) -> list[bool]:
        keep = self.keeps(batch)
        self.left_out.update(index for index, kept in zip(indices, keep) if not kept)
        if indices:  # a batch's rows follow each other
            self._read(indices[0], indices[-1] + 1)
        return keep

    def _read(self, start: int, end: int) -> None:
        spans = []
        for span in sorted([*self.spans, [start, end]]):
            if spans and span[0] <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], span[1])
            else:
                spans.append(span)
        self.spans = spans

    def count(self) -> int | None:
        """The rows left out of those read, each once, where that is exact: one shard (lanes number rows alike), read
        in one run from its first row (a resumed stream skips rows until a pass reads them); else None."""
        from_start = len(self.spans) == 1 and self.spans[0][0] == 0
        return sum(row >= self.first for row in self.left_out) if self.shards == 1 and from_start else None

    def row_of(self, row: int) -> int:
        for left_out in sorted(self.left_out):
            if left_out <= row:
                row += 1
        return row


__all__ = ["RowsLeftOut"]
