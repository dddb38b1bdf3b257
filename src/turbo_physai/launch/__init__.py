"""``turbo-physai run``: apply a config in every Python process of a command.

The launcher (:mod:`turbo_physai.cli.run`) puts ``site/`` first on ``PYTHONPATH``; its
``sitecustomize`` chains to any other ``sitecustomize`` and then calls
:func:`turbo_physai.launch.process.activate` in each process, with the settings passed in the
environment variables below.
"""

from pathlib import Path

#: Exit status of a process whose activation failed before the user's code ran, and of
#: ``turbo-physai run`` when any process of the command failed that way.
EXIT_ACTIVATION = 86

#: JSON settings of the run: config, force, disable, trust, report_dir, run_id, placement.
ENV_SETTINGS = "TURBO_PHYSAI_RUN"
#: Where turbo_physai itself lives, for interpreters that would not find it otherwise.
ENV_HOME = "TURBO_PHYSAI_HOME"

SITE_DIR = Path(__file__).parent / "site"
