"""benchmarks/e2e_rfdetr.py: Roboflow RF-DETR (a variant's config class through
``rfdetr.models.build_model_from_config``, random init, no weights downloaded), stock against the
shipped config ``turbo_physai.rfdetr``: inference and a training step, eager and with
torch.compile, in one process.

    PYTHONPATH=src python benchmarks/e2e_rfdetr.py [--model nano|small|base|medium|large]
        [--batch 8] [--image 640] [--reps 10] [--warmup 3] [--no-compile] [--amp] [--json PATH]
    # CPU smoke run: --quick

The variant's own config (300 queries, 13 query groups in training) at ``--image`` rounded down
to a multiple of its patch size x windows (base: 56, so 640 -> 616; the others 32). Method:
benchmarks/e2e_hosts.py; compiled: ``torch.compile(model.forward)`` (the criterion stays
eager). Writes benchmarks/results/e2e_rfdetr.json unless --json says otherwise. On CUDA the
criterion's matcher imports ``torch_linear_assignment`` (rfdetr's ``train`` extra: a pure-Python
Triton wheel); the run stops before building the model where it is missing.
"""

from __future__ import annotations

import importlib.util
import sys

import e2e_hosts

from turbo_physai import hosts_zoo

# Side multiples: patch size x windows of each variant's config.
STEP = {"base": 56, "nano": 32, "small": 32, "medium": 32, "large": 32}
QUICK = {"num_queries": 20, "num_select": 20, "group_detr": 2}


def build(args):
    if args.device.startswith("cuda") and not importlib.util.find_spec("torch_linear_assignment"):
        sys.exit("e2e_rfdetr.py: rfdetr's matcher needs torch_linear_assignment on CUDA "
                 "(pip install 'rfdetr[train]', or its wheel beside the others in .whl/)")
    step = STEP[args.model]
    side = 2 * step if args.quick else args.image // step * step
    return hosts_zoo.rfdetr(
        args.model, side=side, batch=args.batch, device=args.device, **(QUICK if args.quick else {})
    )


if __name__ == "__main__":
    args = e2e_hosts.parser(
        __doc__, "RF-DETR variant: " + ", ".join(hosts_zoo.RFDETR_VARIANTS), "medium"
    ).parse_args()
    sys.exit(e2e_hosts.run(args, "rfdetr", build))
