"""The progress bar `turbo-physai generate` shows while hashing the targets of a large catalog."""

import io

from rich.console import Console

from turbo_physai.cli import commands, render


def _terminal(monkeypatch, terminal: bool) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(render, "console",
                        Console(file=out, force_terminal=terminal, width=80, color_system=None))
    return out


def _run(total: int) -> commands._Progress:
    with commands._Progress(enabled=True) as progress:
        for done in range(total):
            progress(done, total, f"group.{done}")
    return progress


def test_large_catalog_on_a_terminal_shows_the_bar_and_clears_it(monkeypatch):
    out = _terminal(monkeypatch, terminal=True)
    progress = _run(commands.LARGE_CATALOG)
    assert progress.bar is not None and progress.bar.finished
    task = progress.bar.tasks[0]
    assert (task.completed, task.total) == (commands.LARGE_CATALOG, commands.LARGE_CATALOG)
    assert task.description == f"group.{commands.LARGE_CATALOG - 1}"
    assert "group." in out.getvalue()  # drawn while running (transient: erased at the end)


def test_no_bar_off_a_terminal_for_small_catalogs_or_json(monkeypatch):
    _terminal(monkeypatch, terminal=False)
    assert _run(commands.LARGE_CATALOG).bar is None
    _terminal(monkeypatch, terminal=True)
    assert _run(commands.LARGE_CATALOG - 1).bar is None
    with commands._Progress(enabled=False) as progress:
        progress(0, 100, "group.0")
    assert progress.bar is None
