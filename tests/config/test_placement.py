"""NUMA binding and CPU affinity of a rank, on a fake sysfs topology (two nodes, four GPUs)."""

import os
import subprocess
import sys

import pytest

from turbo_physai.launch import placement
from turbo_physai.launch.placement import PlacementError, gpu_node, nodes, place

GPUS = {  # PCI address -> NUMA node; bus order differs from creation order on purpose
    "0000:c1:00.0": "1",
    "0000:41:00.0": "0",
    "0000:e1:00.0": "1",
    "0000:01:00.0": "0",
}


@pytest.fixture
def topology(tmp_path, monkeypatch):
    """Two NUMA nodes (CPUs 0-3, 4-7), four NVIDIA GPUs, a NIC and an on-board VGA."""
    base = tmp_path / "sys/devices/system/node"
    for node, cpus in (("node0", "0-3"), ("node1", "4-7")):
        (base / node).mkdir(parents=True)
        (base / node / "cpulist").write_text(cpus + "\n")
    (base / "possible").write_text("0-1\n")  # not a node directory
    pci = tmp_path / "sys/bus/pci/devices"
    devices = {addr: ("0x10de", "0x030200", node) for addr, node in GPUS.items()}
    devices["0000:02:00.0"] = ("0x15b3", "0x020000", "0")  # a NIC: not a GPU
    devices["0000:00:02.0"] = ("0x1a03", "0x030000", "0")  # on-board VGA: not NVIDIA
    for addr, (vendor, cls, node) in devices.items():
        (pci / addr).mkdir(parents=True)
        (pci / addr / "vendor").write_text(vendor + "\n")
        (pci / addr / "class").write_text(cls + "\n")
        (pci / addr / "numa_node").write_text(node + "\n")
    calls = {"affinity": [], "memory": []}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: calls["affinity"].append(
        tuple(cpus)))
    monkeypatch.setattr(placement, "_bind_memory", lambda node: calls["memory"].append(node)
                        or f"bound to node {node}")
    return tmp_path, calls


def settings(numa=True, affinity=None, rank_numa=None):
    return {"numa": numa, "affinity": affinity or {}, "rank_numa": rank_numa or {}}


def test_nodes_and_gpus_in_bus_order(topology):
    root, _ = topology
    assert nodes(root) == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    # bus order: 01 (node 0), 41 (node 0), c1 (node 1), e1 (node 1)
    assert [gpu_node(i, {}, root)[0] for i in range(4)] == [0, 0, 1, 1]
    assert gpu_node(0, {"CUDA_VISIBLE_DEVICES": "3,0"}, root)[0] == 1
    assert gpu_node(1, {"CUDA_VISIBLE_DEVICES": "3,0"}, root)[0] == 0
    node, why = gpu_node(2, {"CUDA_VISIBLE_DEVICES": "3,0"}, root)
    assert node is None and "no GPU for local rank 2 (2 visible)" in why
    node, why = gpu_node(0, {"CUDA_VISIBLE_DEVICES": "GPU-8e2f"}, root)
    assert node is None and "cannot map" in why


@pytest.mark.parametrize("rank, node, cpus", [(0, 0, (0, 1, 2, 3)), (3, 1, (4, 5, 6, 7))])
def test_auto_binds_each_rank_to_its_gpus_node(topology, rank, node, cpus):
    root, calls = topology
    got = place(settings(), {"LOCAL_RANK": str(rank)}, root)
    assert (got.node, got.cpus, got.memory) == (node, cpus, f"bound to node {node}")
    assert calls == {"affinity": [cpus], "memory": [node]}


def test_rank_numa_wins_and_rank_affinity_sets_the_cpus(topology):
    root, calls = topology
    got = place(settings(rank_numa={"0": 1}, affinity={"0": [5]}), {"LOCAL_RANK": "0"}, root)
    assert (got.node, got.cpus) == (1, (5,))
    assert calls == {"affinity": [(5,)], "memory": [1]}


def test_only_usable_cpus_of_the_node(topology, monkeypatch):
    root, calls = topology
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3, 6})
    assert place(settings(), {"LOCAL_RANK": "0"}, root).cpus == (2, 3)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {6})
    with pytest.raises(PlacementError, match="may use none of NUMA node 0's CPUs"):
        place(settings(), {"LOCAL_RANK": "0"}, root)


def test_numa_off_binds_nothing(topology):
    root, calls = topology
    got = place(settings(numa=False), {"LOCAL_RANK": "1"}, root)
    assert got.node is None and calls == {"affinity": [], "memory": []}


def test_where_the_machine_does_not_tell_the_rank_runs_unbound_and_says_why(topology):
    root, calls = topology
    got = place(settings(), {"LOCAL_RANK": "7"}, root)
    assert got.node is None
    assert got.notes == ["numa: not bound, no GPU for local rank 7 (4 visible)"]
    (root / "sys/bus/pci/devices/0000:01:00.0/numa_node").write_text("-1\n")
    got = place(settings(), {}, root)
    assert "reports no NUMA node" in got.notes[0]
    single = root / "single"
    (single / "sys/devices/system/node/node0").mkdir(parents=True)
    (single / "sys/devices/system/node/node0/cpulist").write_text("0-7\n")
    got = place(settings(), {}, single)
    assert got.notes == ["numa: not bound, this machine has 1 NUMA node(s)"]
    assert calls == {"affinity": [], "memory": []}


def test_a_node_the_machine_lacks_fails(topology):
    root, _ = topology
    with pytest.raises(PlacementError, match="NUMA node 5 does not exist here"):
        place(settings(rank_numa={"0": 5}), {}, root)


def test_set_mempolicy_for_real_on_this_machines_first_node():
    """In a child: the syscall runs (bound, or refused with the kernel's reason)."""
    if not nodes():
        pytest.skip("no NUMA information in /sys here")
    node = min(nodes())
    code = ("from turbo_physai.launch.placement import _bind_memory; "
            f"print(_bind_memory({node}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in (f"bound to node {node}",) or "refused" in out.stdout
