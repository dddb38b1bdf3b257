"""Errors decided on the device, raised where a CUDA graph allows it (issue 29).

Host code that validates device data (``if not (boxes[:, 2:] >= boxes[:, :2]).all(): raise``,
a kernel's status word) synchronizes the stream to read the answer, which a CUDA graph capture
forbids. :func:`check_later` keeps the check and its error: outside a capture it reads the flag
at once (the synchronization the ``if`` made) and raises; while :func:`collecting` (a
``cuda_graph`` capture) it queues the flag. After each replay :meth:`Collected.fetch` starts
copying all the graph's flags to the host (one copy, no wait) and :meth:`Collected.raise_failed`
waits for that copy and raises the first failed check's error. The work after the check has
then run on the bad data, as it would not have eagerly; the error is the same, raised later
(``cuda_graph`` says when). Its message cannot show device values from inside a graph (they
live in the graph's memory, reused by later kernels): ``deferred`` says so instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_local = threading.local()


class Collected:
    """The checks queued while one graph was captured."""

    def __init__(self):
        self.flags: list[Any] = []
        self.errors: list[tuple[type[Exception], str]] = []
        self.stacked = None
        self.host = self.copied = None  # the flags' host copy; the event that ends it
        self.fetched = False

    def seal(self) -> None:
        """Stack the flags into one device tensor (call while still capturing: the stacking is
        then part of the graph)."""
        import torch

        if self.flags:
            self.stacked = torch.stack([f.reshape(()) for f in self.flags])

    def fetch(self) -> None:
        """After a replay: start copying the flags to the host (pinned memory, no wait)."""
        if self.stacked is None:
            return
        import torch

        if self.host is None:
            cuda = self.stacked.is_cuda
            self.host = torch.empty(self.stacked.shape, dtype=self.stacked.dtype,
                                    pin_memory=cuda)
            self.copied = torch.cuda.Event() if cuda else None
        self.host.copy_(self.stacked, non_blocking=True)
        if self.copied is not None:
            self.copied.record()
        self.fetched = True

    def raise_failed(self) -> None:
        """After a replay: raise the error of the first check whose flag is set, waiting for the
        copy :meth:`fetch` started (started now if none is)."""
        if self.stacked is None:
            return
        if not self.fetched:
            self.fetch()
        self.fetched = False
        if self.copied is not None:
            self.copied.synchronize()
        for flag, (error, message) in zip(self.host.tolist(), self.errors, strict=True):
            if flag:
                raise error(message)


def check_later(failed, message: Callable[[], str] | str, error: type[Exception] = ValueError,
                *, deferred: str | None = None, raise_if: bool = True) -> None:
    """Raise ``error(message)`` when ``failed`` (a one-element bool tensor, or anything ``bool``
    takes) is ``raise_if``: now, or, while a graph is captured, after each of its replays
    (``deferred``: the message then, default ``message``). ``message`` may be a callable (built
    only when raised eagerly)."""
    collected = getattr(_local, "collected", None)
    if collected is not None and getattr(failed, "is_cuda", False):
        import torch

        if torch.cuda.is_current_stream_capturing():
            if not raise_if:
                failed = torch.logical_not(failed)
            text = deferred if deferred is not None else _text(message)
            collected.flags.append(failed)
            collected.errors.append((error, f"{text} (found after a CUDA graph replay)"))
            return
    if bool(failed) == raise_if:
        raise error(_text(message))


def _text(message: Callable[[], str] | str) -> str:
    return message() if callable(message) else message


@contextlib.contextmanager
def collecting() -> Iterator[Collected]:
    """Queue :func:`check_later` calls made on this thread while capturing; seal on exit."""
    previous = getattr(_local, "collected", None)
    _local.collected = collected = Collected()
    try:
        yield collected
        collected.seal()
    finally:
        _local.collected = previous
