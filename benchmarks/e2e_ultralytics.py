"""benchmarks/e2e_ultralytics.py: Ultralytics RT-DETR (``RTDETR("rtdetr-<l|x>.yaml")``, random
init, nothing downloaded), stock against the shipped config ``turbo_physai.ultralytics``:
inference and a training step, eager and with torch.compile, in one process.

    PYTHONPATH=src python benchmarks/e2e_ultralytics.py [--model l|x] [--batch 8] [--image 640]
        [--reps 10] [--warmup 3] [--no-compile] [--amp] [--json PATH]
    # CPU smoke run: --quick

Method: benchmarks/e2e_hosts.py. Compiled: ``torch.compile(model.predict)`` (backbone, hybrid
encoder, decoder; the loss and its Hungarian matching stay eager). Writes
benchmarks/results/e2e_ultralytics.json unless --json says otherwise.
"""

from __future__ import annotations

import sys

import e2e_hosts

from turbo_physai import hosts_zoo


def build(args):
    side = 64 if args.quick else args.image
    return hosts_zoo.ultralytics_rtdetr(args.model, side=side, batch=args.batch, device=args.device)


if __name__ == "__main__":
    args = e2e_hosts.parser(__doc__, "RT-DETR scale: l or x", "l").parse_args()
    sys.exit(e2e_hosts.run(args, "ultralytics", build))
