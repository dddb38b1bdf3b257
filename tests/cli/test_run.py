"""``turbo-physai run``: every Python process of the command activates; launchers do not; a
failed activation stops the process before user code; under torchrun the ranks compare."""

import json
import os
import textwrap

import pytest

TRAIN = """\
import os, sys
import torch
import torch.distributed as dist
from tpa_fixture_lib import shapes

dist.init_process_group("gloo")
rank = dist.get_rank()
assert shapes.gaussian_2d((2, 2))[0] == "fast", "not patched"
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"rank {rank} trained patched", flush=True)
dist.destroy_process_group()
"""

SCRIPT = """\
import os, sys
from tpa_fixture_lib import shapes
print("user code:", shapes.gaussian_2d((1,))[0], os.environ.get("TPA_SET"),
      os.environ.get("TPA_GONE"), sorted(os.sched_getaffinity(0)), flush=True)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def config(cli, tmp_path):
    def make(*groups, name="opt.yaml"):
        out = tmp_path / name
        assert cli("generate", *groups, "-o", out, "--id", "run").returncode == 0
        return out

    return make


def script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def report(tmp_path):
    return json.loads((tmp_path / "reports" / "report.json").read_text())


def test_single_process_is_patched_and_exit_status_is_the_commands(cli, config, tmp_path):
    user = script(tmp_path, "user.py", SCRIPT)
    done = cli("run", "--config", config("fixture.gaussian"), "--report-dir", "reports", "--",
               "python", user, "3")
    assert done.returncode == 3, done.stderr
    assert "user code: fast" in done.stdout
    merged = report(tmp_path)
    [proc] = merged["processes"]
    assert proc["activation"]["ok"] and proc["process"]["rank"] is None
    assert [g["status"] for g in proc["report"]["groups"]] == ["applied"]
    assert merged["exit_code"] == 3
    rendered = cli("report", tmp_path / "reports" / "report.json")
    assert rendered.returncode == 0 and "fixture.gaussian" in rendered.stdout


def test_failed_activation_stops_before_user_code(cli, config, tmp_path):
    user = script(tmp_path, "user.py", SCRIPT)
    done = cli("run", "--config", config("fixture.incompatible"), "--report-dir", "reports",
               "--", "python", user, "0")
    assert done.returncode == 86
    assert "user code" not in done.stdout
    assert "activation failed" in done.stderr and "compatibility.incompatible" in done.stderr
    [proc] = report(tmp_path)["processes"]
    assert not proc["activation"]["ok"] and "fixture.incompatible" in proc["activation"]["error"]


def test_disable_group_lets_the_rest_run(cli, config, tmp_path):
    user = script(tmp_path, "user.py", SCRIPT)
    done = cli("run", "--config", config("fixture.gaussian", "fixture.incompatible"),
               "--disable-group", "fixture.incompatible", "--report-dir", "reports", "--",
               "python", user, "0")
    assert done.returncode == 0, done.stderr
    statuses = {g["id"]: g["status"] for g in report(tmp_path)["processes"][0]["report"]["groups"]}
    assert statuses == {"fixture.gaussian": "applied", "fixture.incompatible": "skipped"}


def test_existing_sitecustomize_still_runs_and_runtime_config(cli, config, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['TPA_CHAINED'] = 'yes'\n")
    user = script(tmp_path, "user.py", "import os\nprint('chained:', os.environ.get("
                  "'TPA_CHAINED'))\n" + SCRIPT)
    cpu = sorted(os.sched_getaffinity(0))[0]
    runtime = script(tmp_path, "runtime.yaml", f"""\
        schema_version: turbophysai/runtime-config/v1
        kind: RuntimeConfig
        environment:
          set: {{TPA_SET: "1"}}
          unset: [TPA_GONE]
        process:
          numa: false
          rank_affinity: {{0: "{cpu}"}}
          rank_numa: {{}}
        """)
    done = cli("run", "--config", config("fixture.gaussian"), "--runtime-config", runtime,
               "--report-dir", "reports", "--", "python", user, "0",
               env={"TPA_GONE": "x", "PYTHONPATH": cli.pythonpath + os.pathsep + str(site)})
    assert done.returncode == 0, done.stderr
    assert "chained: yes" in done.stdout
    assert f"user code: fast 1 None [{cpu}]" in done.stdout


def test_torchrun_two_ranks_are_patched_and_listed(cli, config, tmp_path):
    train = script(tmp_path, "train.py", TRAIN)
    done = cli("run", "--config", config("fixture.gaussian"), "--report-dir", "reports", "--",
               "torchrun", "--nproc-per-node", "2", train)
    assert done.returncode == 0, done.stderr
    assert "rank 0 trained patched" in done.stdout and "rank 1 trained patched" in done.stdout
    merged = report(tmp_path)
    assert merged["summary"]["ranks"] == [0, 1]  # torchrun itself wrote no report
    assert len(merged["processes"]) == 2 and not merged["summary"]["mismatch"]
    for proc in merged["processes"]:
        assert proc["report"]["groups"][0]["status"] == "applied"
        assert [r["rank"] for r in proc["ranks"]] == [0, 1]


def test_rank_with_a_different_config_fails_every_rank(cli, config, tmp_path):
    train = script(tmp_path, "train.py", TRAIN)
    # Rank 1 starts with fixture.sparse disabled: its applied groups differ from rank 0's.
    wrapper = script(tmp_path, "rank.sh", f"""\
        if [ "$RANK" = 1 ]; then
          TURBO_PHYSAI_RUN=$(python -S -c 'import json, os
        s = json.loads(os.environ["TURBO_PHYSAI_RUN"]); s["disable"] = ["fixture.sparse"]
        print(json.dumps(s))')
          export TURBO_PHYSAI_RUN
        fi
        exec python {train}
        """)
    done = cli("run", "--config", config("fixture.gaussian", "fixture.sparse"), "--report-dir",
               "reports", "--", "torchrun", "--nproc-per-node", "2", "--no-python", "sh", wrapper)
    assert done.returncode == 86, done.stderr
    assert "trained" not in done.stdout
    merged = report(tmp_path)
    assert merged["summary"]["mismatch"]
    assert len(merged["summary"]["activation_failed"]) == 2
    for proc in merged["processes"]:
        assert "ranks applied different optimizations" in proc["activation"]["error"]
