"""Cutting a new version of an artifact, guided by the chunks of its previous version.

FastCDC decides each cut point from the bytes since the previous cut only. So where the new
version has, at a cut point, the same bytes as a chunk of the previous version at the same offset,
FastCDC would cut that very chunk again: hashing the bytes is enough to reuse it, and the chunker
need not run over them. An in-place edit of a large file (weights, optimizer state, a database
page) then costs a parallel hash of the unchanged bytes plus FastCDC over the changed regions,
instead of FastCDC over everything on one thread.

The cut is the one FastCDC gives on its own (the previous version's last chunk, cut by the end of
the file rather than by its content, is reused only where the new version ends too). An edit that
shifts the bytes after it (an insertion) finds no chunk at the old offsets, and FastCDC cuts the
rest as usual; dedupe still finds the shifted chunks by their ids, it just has to hash them.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from pyfastcdc import FastCDC

from .records import ChunkRef

#: Previous chunks are verified in jobs of about this many bytes.
_JOB = 1 << 20


class _Verifier:
    """Whether each previous chunk is still there, byte for byte, at its old offset. Jobs run on
    the pool ahead of the cut, at most ``depth`` at a time, in the order the cut asks."""

    def __init__(
        self,
        view: memoryview,
        previous: Sequence[ChunkRef],
        starts: Sequence[int],
        content_id: Callable[[memoryview], str],
        pool: ThreadPoolExecutor,
        depth: int,
    ) -> None:
        self._view, self._previous, self._starts = view, previous, starts
        self._content_id, self._pool, self._depth = content_id, pool, depth
        self._jobs: deque[tuple[int, int, Future[list[bool]]]] = deque()
        self._next = 0  # first previous chunk not yet in a job

    def matches(self, index: int) -> bool:
        while self._jobs and self._jobs[0][1] <= index:
            self._jobs.popleft()
        while self._next <= index or (len(self._jobs) < self._depth and self._next < len(self._previous)):
            self._submit()
        start, _, job = self._jobs[0]
        return job.result()[index - start]

    def _submit(self) -> None:
        first = last = self._next
        size = 0
        while last < len(self._previous) and size < _JOB:
            size += self._previous[last].size
            last += 1
        self._jobs.append((first, last, self._pool.submit(self._verify, first, last)))
        self._next = last

    def _verify(self, first: int, last: int) -> list[bool]:
        end = len(self._view)
        found = []
        for index in range(first, last):
            ref, start = self._previous[index], self._starts[index]
            stop = start + ref.size
            # The last chunk was cut by the end of the file: reuse it only where the file ends too.
            is_last = index == len(self._previous) - 1
            fits = stop == end if is_last else stop <= end
            found.append(fits and self._content_id(self._view[start:stop]) == ref.id)
        return found

    def cancel(self) -> None:
        for _, _, job in self._jobs:
            job.cancel()
        self._jobs.clear()


def cut(
    view: memoryview,
    chunker: FastCDC,
    previous: Sequence[ChunkRef],
    content_id: Callable[[memoryview], str],
    pool: ThreadPoolExecutor,
    depth: int,
) -> Iterator[memoryview | ChunkRef]:
    """The chunks of ``view`` in order: a previous chunk (its ref) where it is unchanged at its old
    offset, otherwise a new piece cut by FastCDC."""
    starts = list(itertools.accumulate((ref.size for ref in previous), initial=0))
    verifier = _Verifier(view, previous, starts, content_id, pool, depth)
    position, index, end = 0, 0, len(view)
    try:
        while position < end:
            if index < len(previous) and starts[index] == position and verifier.matches(index):
                yield previous[index]
                position += previous[index].size
                index += 1
                continue
            # Changed bytes: FastCDC from here until it cuts where an unchanged previous chunk starts.
            for piece in chunker.cut_buf(view[position:]):
                stop = position + piece.offset + piece.length
                yield view[position + piece.offset : stop]
                while index < len(previous) and starts[index] < stop:
                    index += 1
                if index < len(previous) and starts[index] == stop and verifier.matches(index):
                    break
            position = stop
    finally:
        verifier.cancel()
