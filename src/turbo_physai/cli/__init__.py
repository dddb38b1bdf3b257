"""The ``turbo-physai`` command line. Exit statuses are stable (docs/cli.md):

0 ok; 1 the command worked and found something (check: a group would not apply; diff: the
configs differ); 2 usage or config error; 86 (EXIT_ACTIVATION) a process of ``run`` failed to
activate before the user's command started; otherwise ``run`` returns the command's status.
"""

from .main import main

__all__ = ["main"]
