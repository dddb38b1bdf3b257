"""Random apply/rollback sequences over random groups: after rollback the state is identical."""

import sys
import types

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import turbo_physai as tpa
from turbo_physai import group, replace, wrap

MOD, ALIASES, REPL = "tpa_hyp_lib", "tpa_hyp_alias", "tpa_hyp_repl"
KINDS = ("function", "method", "staticmethod", "classmethod", "property", "inherited")


def _build_library():
    lib, alias, repl = (types.ModuleType(n) for n in (MOD, ALIASES, REPL))
    base = type("Base", (), {"inherited": lambda self, x: ("orig", x)})
    klass = type(
        "K",
        (base,),
        {
            "method": lambda self, x: ("orig", x),
            "staticmethod": staticmethod(lambda x: ("orig", x)),
            "classmethod": classmethod(lambda cls, x: ("orig", x)),
            "property": property(lambda self: "orig"),
        },
    )
    lib.Base, lib.K = base, klass
    lib.function = lambda x: ("orig", x)
    alias.function = lib.function
    repl.function = lambda x: ("new", x)
    repl.method = repl.inherited = lambda self, x: ("new", x)
    repl.staticmethod = lambda x: ("new", x)
    repl.classmethod = lambda cls, x: ("new", x)
    repl.property = property(lambda self: "new")
    repl.cond = lambda *args: True
    repl.wrapper = lambda original, options: lambda *a, **k: ("wrapped", original(*a, **k))
    for m in (lib, alias, repl):
        sys.modules[m.__name__] = m
    return lib, alias


def _target(kind):
    return f"{MOD}.function" if kind == "function" else f"{MOD}.K.{kind}"


def _state(lib, alias):
    owners = {"lib": lib, "alias": alias, "K": lib.K, "Base": lib.Base}
    return {name: dict(vars(o)) for name, o in owners.items()}


def _same(a, b):
    return a.keys() == b.keys() and all(
        a[o].keys() == b[o].keys() and all(a[o][k] is b[o][k] for k in a[o]) for o in a
    )


declaration = st.builds(
    lambda kind, use_wrap, cond, alias: (
        kind,
        use_wrap and kind != "property",
        cond and kind != "property",
        alias and kind == "function",
    ),
    st.sampled_from(KINDS),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    groups=st.lists(st.lists(declaration, min_size=1, max_size=3), min_size=1, max_size=4),
    rounds=st.lists(
        st.tuples(st.lists(st.integers(0, 3), max_size=4), st.booleans()), min_size=1, max_size=4
    ),
    broken=st.sets(st.integers(0, 3), max_size=2),
)
def test_random_sequences_restore_exactly(groups, rounds, broken):
    lib, alias = _build_library()
    try:
        declared = []
        for gi, decls in enumerate(groups):
            built, used = [], set()
            for kind, use_wrap, cond, with_alias in decls:
                if kind in used:
                    continue
                used.add(kind)
                make = wrap if use_wrap else replace
                built.append(
                    make(
                        _target(kind),
                        f"{REPL}.wrapper" if use_wrap else f"{REPL}.{kind}",
                        aliases=(f"{ALIASES}.function",) if with_alias else (),
                        runtime_condition=f"{REPL}.cond" if cond else None,
                    )
                )
            if gi in broken:  # fails half way through installing the group
                built.append(replace("builtins.int.bit_length", f"{REPL}.staticmethod"))
            declared.append(group(f"g{gi}", *built))
        original = _state(lib, alias)
        for picks, strict in rounds:
            chosen = [declared[i] for i in sorted(set(picks)) if i < len(declared)]
            if not chosen:
                continue
            try:
                report = tpa.apply(groups=chosen, strict=strict)
            except tpa.ApplyError:
                assert _same(original, _state(lib, alias))
                continue
            for gr in report.groups:
                assert gr.status in ("applied", "blocked", "rolled_back", "not_started")
                event(f"group {gr.status}")
            lib.K().method(1), lib.K.staticmethod(1), lib.K.classmethod(1), lib.function(1)
            outcome = tpa.rollback()
            assert outcome["failed"] == [] and outcome["drifted"] == []
            assert _same(original, _state(lib, alias))
    finally:
        tpa.rollback()
        for name in (MOD, ALIASES, REPL):
            sys.modules.pop(name, None)
