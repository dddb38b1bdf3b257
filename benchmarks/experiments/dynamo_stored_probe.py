"""Which read of an instance's own attribute, inside a class property shadowing it, does dynamo
trace? One line per variant and fullgraph. ``python3 benchmarks/experiments/dynamo_stored_probe.py``

Measured 2026-12-03: torch 2.11 (H200 image) crashes with RecursionError on ``self.__dict__.get``,
``vars(self).get`` and subscripts, with or without fullgraph; ``dict.get(self.__dict__, ...)``,
an ``items()`` loop and ``object.__getattribute__`` give the right value with a graph break.
torch 2.13 and 2.14 trace all but ``object.__getattribute__`` and ``disable`` in one graph.
replace_stored's descriptor reads with ``dict.get``."""
import torch

MISSING = object()
A = "core"


def orig(x):
    return x + 1


def new(x):
    return x * 2


def disabled(self):
    return self.__dict__.get(A, MISSING)


READS = {
    "dict_get": lambda self: self.__dict__.get(A, MISSING),
    "vars_get": lambda self: vars(self).get(A, MISSING),
    "subscript": lambda self: self.__dict__[A] if A in self.__dict__ else MISSING,
    "dict_method": lambda self: dict.get(self.__dict__, A, MISSING),
    "items_loop": lambda self: next((v for k, v in self.__dict__.items() if k == A), MISSING),
    "object_dict": lambda self: object.__getattribute__(self, "__dict__").get(A, MISSING),
    "disabled": torch._dynamo.disable(disabled),
}


for name, read in READS.items():
    def get(self, read=read):
        stored = read(self)
        return new if stored is orig else stored

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.core = orig

        def forward(self, x):
            return self.core(x)

    M.core = property(get, lambda self, v: self.__dict__.__setitem__(A, v))
    for fullgraph in (True, False):
        torch._dynamo.reset()
        try:
            y = torch.compile(M(), fullgraph=fullgraph, backend="eager")(torch.ones(2))
            ok = "ok" if torch.equal(y, torch.full((2,), 2.0)) else f"WRONG {y}"
            print(torch.__version__, name, f"fullgraph={fullgraph}", ok)
        except Exception as e:  # noqa: BLE001
            print(torch.__version__, name, f"fullgraph={fullgraph}", "FAIL", type(e).__name__,
                  str(e).splitlines()[0][:100])
