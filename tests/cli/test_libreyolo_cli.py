"""The shipped config ``turbo_physai.libreyolo`` by ID on the command line: ``check`` lists its
groups, ``run`` patches LibreYOLO in the user's process before its code runs."""

import json
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("libreyolo")

from turbo_physai.catalogs import libreyolo as catalog  # noqa: E402

USER = """\
import sys
import libreyolo.kernels as registry
from libreyolo.models.rtdetr import utils
print("slot:", registry.resolve("fake_quant_fp8").__module__)
print("family:", utils.maybe_ms_deform_attn.__module__, flush=True)
sys.exit(5)
"""


def test_check_by_id_lists_every_shipped_group_applicable(cli):
    done = cli("check", "turbo_physai.libreyolo", "--json")
    assert done.returncode == 0, done.stderr
    groups = json.loads(done.stdout)["groups"]
    assert [g["id"] for g in groups] == [g.id for g in (catalog.KERNELS, *catalog.FAMILY_GROUPS)]
    assert {g["decision"] for g in groups} == {"apply"}


def test_run_with_the_id_patches_the_users_process(cli, tmp_path):
    user = tmp_path / "user.py"
    user.write_text(USER)
    command = [sys.executable, user]  # the interpreter that has libreyolo
    done = cli(
        "run", "--config", "turbo_physai.libreyolo", "--report-dir", "reports", "--", *command
    )
    assert done.returncode == 5, done.stderr
    assert "slot: turbo_physai.ops.quant" in done.stdout
    assert "family: turbo_physai.optimizations.common.libreyolo.families" in done.stdout
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    [proc] = report["processes"]
    assert {g["status"] for g in proc["report"]["groups"]} == {"applied"}


def test_list_names_libreyolo_as_the_host_library_with_its_release(cli):
    import libreyolo

    rows = json.loads(cli("list", "--json").stdout)
    hosts = {r["catalog"]: r["host_packages"] for r in rows}
    assert hosts["turbo_physai.catalogs.libreyolo"] == {"libreyolo": libreyolo.__version__}
