"""Write small config files for the loader tests."""

import textwrap

import pytest

HEAD = """\
schema_version: turbophysai/optimization-config/v1
kind: OptimizationConfig
metadata: {id: %s, version: "1.0"}
"""


@pytest.fixture
def write(tmp_path):
    def _write(name, body, config_id=None, head=True):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = (HEAD % (config_id or path.stem) if head else "") + textwrap.dedent(body)
        path.write_text(text, encoding="utf-8")
        return path

    return _write
