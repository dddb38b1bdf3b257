"""Bootstrap of ``turbo-physai run``: placed first on PYTHONPATH so every Python process of the
command runs it at startup. It first runs the ``sitecustomize`` this one hides (if any), then
activates turbo_physai in this process (launcher processes such as torchrun skip themselves)."""

import importlib
import os
import sys


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError as err:
        if err.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved
        sys.modules["sitecustomize"] = ours


def _activate():
    if not os.environ.get("TURBO_PHYSAI_RUN"):
        return
    try:
        import turbo_physai.launch.process as process
    except ImportError:
        # Another interpreter than the launcher's: fall back to the launcher's copy (last).
        sys.path.append(os.environ.get("TURBO_PHYSAI_HOME", ""))
        import turbo_physai.launch.process as process
    process.activate()


_chain()
_activate()
