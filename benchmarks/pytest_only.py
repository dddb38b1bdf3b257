"""pytest plugin for reruns on the GPU machine: ``-p pytest_only`` with ``TPA_ONLY_IDS=FILE``
keeps only the node IDs listed in FILE (one per line; IDs may hold spaces, which a command line
would split), e.g. the tests a timed-out pass never reached. benchmarks/gpu_session.sh loads it
when ONLY_IDS is set."""

import os
from pathlib import Path


def pytest_collection_modifyitems(config, items):
    wanted = {line.strip() for line in Path(os.environ["TPA_ONLY_IDS"]).read_text().splitlines()}
    keep = [item for item in items if item.nodeid in wanted]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in wanted])
    items[:] = keep
