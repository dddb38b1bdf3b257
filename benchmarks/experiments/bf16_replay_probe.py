"""Why a replayed bfloat16 training step can differ from eager (issue 29's GPU tests).

    PYTHONPATH=src python benchmarks/experiments/bf16_replay_probe.py

Tiny Deformable DETR (zoo), dropout off, deterministic mode, bfloat16 autocast: one training
forward+backward eager, then the same with ``turbo_physai.deformable_detr.cuda_graph`` (second
call: a replay), and the largest gradient difference. Each case in a fresh process (cuBLAS reads
its workspace setting once): attention backend default or math; CUBLAS_WORKSPACE_CONFIG unset (or
also :4096:8 with PROBE=--workspace); the eager reference with the autocast weight cache on or
off (capture runs it off).

H200, torch 2.11, transformers 5.17 (2026-12-03): math attention, cache on and off alike: 79
gradients differ, max 1.95e-3. The default-attention cases did not run then (a bug in this
script, fixed since); the GPU test of the same step with default attention is bit-exact.
"""

import contextlib
import itertools
import json
import os
import subprocess
import sys


def case(math, workspace, cache):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import turbo_physai as tpa
    from turbo_physai import zoo

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    built = zoo.build("deformable_detr", "tiny", device="cuda")
    model, pixels = built.model.train(), built.inputs["pixel_values"]
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for k, v in vars(m).items():
            if "dropout" in k and isinstance(v, float):
                setattr(m, k, 0.0)
    gen = torch.Generator().manual_seed(1)
    labels = [{"class_labels": torch.randint(0, 10, (3,), generator=gen).cuda(),
               "boxes": (torch.rand(3, 4, generator=gen) * 0.4 + 0.3).cuda()}
              for _ in range(pixels.shape[0])]

    def grads(eager_cache=True):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=eager_cache):
            loss = model(pixel_values=pixels, labels=labels).loss
        loss.backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    with sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext():
        with tpa.applied("turbo_physai.deformable_detr", strict=True):
            want = grads(cache)
        with tpa.applied("turbo_physai.deformable_detr.cuda_graph", strict=True):
            grads()
            got = grads()
    diffs = [(a.float() - b.float()).abs().max().item() for a, b in zip(got, want, strict=True)]
    return {"math_sdpa": math, "workspace": workspace, "eager_cache": cache,
            "params_differing": sum(d > 0 for d in diffs), "max_diff": max(diffs)}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(case(*json.loads(sys.argv[1]))))
        sys.exit()
    workspaces = [None, ":4096:8"] if "--workspace" in os.environ.get("PROBE", "") else [None]
    for math, workspace, cache in itertools.product([False, True], workspaces, [True, False]):
        env = dict(os.environ)
        if workspace:
            env["CUBLAS_WORKSPACE_CONFIG"] = workspace
        out = subprocess.run([sys.executable, __file__, json.dumps([math, workspace, cache])],
                             env=env, capture_output=True, text=True)
        print(out.stdout.strip().splitlines()[-1] if out.returncode == 0
              else f"{math} {workspace} {cache}: failed {out.stderr[-400:]}", flush=True)
