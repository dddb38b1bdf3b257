"""The host time ``cuda_graph`` spends per call on the module tree (issue 29): its one-walk
``_module_state`` against the formulation it replaced (``modules()`` for hooks and training
flags, then a tuple per tensor over ``parameters()`` and ``buffers()``), on the same models.

    PYTHONPATH=src:benchmarks python benchmarks/experiments/signature_walk_probe.py

Deformable DETR (ResNet-50, as benchmarks/e2e_deformable_detr.py builds it) and Ultralytics
RT-DETR-l (random init); microseconds per call, median of 7 rounds of 100 calls, the two
formulations in turns. Runs on the CPU (the walk reads no tensor data).
"""

import statistics
import time

from e2e_deformable_detr import build_model

from turbo_physai import hosts_zoo
from turbo_physai.optimizations.common.cuda_graph import _module_state


def replaced(module):
    """What ``_signature`` computed before (7617ccd), for comparison only."""
    training = []
    for m in module.modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks \
                or m._backward_pre_hooks:
            return "hooks"
        training.append(m.training)
    state = tuple((id(t), t.data_ptr(), t.requires_grad)
                  for t in (*module.parameters(), *module.buffers()))
    return tuple(training), state


def us_per_call(fn, model, rounds=7, calls=100):
    times = []
    for _ in range(rounds):
        fn(model)
        start = time.perf_counter()
        for _ in range(calls):
            fn(model)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


if __name__ == "__main__":
    models = {"Deformable DETR R50": build_model("cpu"),
              "Ultralytics RT-DETR-l": hosts_zoo.ultralytics_rtdetr("l", side=64, batch=1,
                                                                    device="cpu").model}
    print("| model | modules | tensors | replaced us | _module_state us | ratio |\n"
          "|---|---|---|---|---|---|")
    for name, model in models.items():
        before, now = us_per_call(replaced, model), us_per_call(_module_state, model)
        tensors = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
        print(f"| {name} | {sum(1 for _ in model.modules())} | {tensors} | {before:.0f} "
              f"| {now:.0f} | {before / now:.1f}x |")
