"""replace_stored: every instance that stored the function reads ours while applied, whenever it
was built; nothing is written into an instance; rollback leaves the class as it was."""

import pytest
import tpa_stored_lib as lib
from tpa_stored_lib import core

import turbo_physai as tpa
from turbo_physai import group, replace_stored
from turbo_physai.engine.declarations import DeclarationError

LIB = "tpa_stored_lib"


def stored(owner="Holder", original="core", replacement="ours", **kwargs):
    return group(
        "stored",
        replace_stored(
            f"{LIB}.{owner}", "core", f"{LIB}.{original}", f"{LIB}.{replacement}", **kwargs
        ),
    )


def checks(report):
    return {c.code: c for c in report.group("stored").checks}


def test_instances_built_before_and_while_applied_read_ours_and_roll_back():
    before = lib.Holder()
    with tpa.applied(groups=[stored()], strict=True) as report:
        during, child = lib.Holder(), lib.Child()
        assert before.run(2) == during.run(2) == child.run(2) == ("ours", 2)
        assert report.group("stored").targets == [f"{LIB}.Holder.core"]
        for instance in (before, during, child):
            assert vars(instance)["core"] is lib.core  # never written
    assert "core" not in vars(lib.Holder)
    assert before.run(2) == during.run(2) == child.run(2) == ("stock", 2)


def test_an_instance_given_another_function_keeps_it():
    h = lib.Holder()
    with tpa.applied(groups=[stored()], strict=True):
        h.core = lib.other
        assert h.run(3) == ("other", 3)
        assert vars(h)["core"] is lib.other
        del h.core
        with pytest.raises(AttributeError, match="core"):
            h.run(1)
        h.core = lib.core
        assert h.run(1) == ("ours", 1)
    assert h.run(1) == ("stock", 1)


def test_runtime_condition_routes_each_call():
    h = lib.Holder()
    g = stored(runtime_condition=f"{LIB}.small")
    with tpa.applied(groups=[g], strict=True) as report:
        assert h.run(2) == ("ours", 2)
        assert h.run(20) == ("stock", 20)
        counts = report.group("stored").to_dict()["dispatchers"][f"{LIB}.Holder.core"]
    assert counts == {"replacement": 1, "original": 1}


@pytest.mark.parametrize(
    ("kwargs", "reason", "words"),
    [
        ({"owner": "Missing"}, "target.unresolved", "tpa_stored_lib.Missing"),
        ({"original": "missing"}, "target.unresolved", "tpa_stored_lib.missing"),
        ({"owner": "NOT_A_CLASS"}, "kind.mismatch", "is not a class"),
        ({"owner": "ClassLevel"}, "replace_stored.class_attribute", "defined on the class"),
        ({"owner": "StoresAnother"}, "replace_stored.not_stored", "does not store"),
        ({"replacement": "ours_narrower"}, "signature.mismatch", ""),
        ({"replacement": "missing"}, "replacement.unresolved", "tpa_stored_lib.missing"),
        ({"runtime_condition": f"{LIB}.missing"}, "runtime_condition.unresolved", "missing"),
    ],
)
def test_what_cannot_be_served_blocks_the_group_naming_it(kwargs, reason, words):
    g = stored(**kwargs)
    report = tpa.check(groups=[g])
    result = report.group("stored")
    assert result.decision == "block" and reason in result.reasons, str(report)
    assert words in str(result.to_dict()["checks"])
    with pytest.raises(tpa.ApplyError, match="stored"):
        tpa.apply(groups=[g], strict=True)
    assert not tpa.active_report() or not tpa.active_report().groups
    assert "core" not in vars(lib.Holder) and lib.ClassLevel.core is lib.core


def test_an_original_another_group_replaced_blocks_instead_of_reaching_nothing():
    # a runtime_condition makes the installed object the engine's Dispatcher
    first = group("first", tpa.replace(f"{LIB}.core", f"{LIB}.other",
                                       runtime_condition=f"{LIB}.small"))
    with tpa.applied(groups=[first], strict=True):
        result = tpa.check(groups=[stored()]).group("stored")
    assert result.reasons == ["replace_stored.original_replaced"]
    assert "tpa_stored_lib.core is a turbo_physai replacement" in str(result.to_dict()["checks"])
    assert tpa.check(groups=[stored()]).group("stored").decision == "apply"  # once rolled back


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("m.C", "not a name", "m.f", "m.g"), "attribute must be a name"),
        (("m.C", "core", "not a path", "m.g"), "original must be a dotted import path"),
        (("m.C", "core", "m.f", "m.g", None, ("bad path",)), "callers must be"),
    ],
)
def test_malformed_declarations_raise_naming_the_field(args, words):
    with pytest.raises(DeclarationError, match=words):
        replace_stored(*args)


def test_the_evidence_paths_are_the_function_init_and_callers():
    decl = replace_stored("m.C", "core", "m.f", "m.g", callers="m.C.forward")
    assert decl.writes == ("m.C.core",)
    assert decl.replaces == ("m.f",)
    assert decl.reads == ("m.C.__init__", "m.C.forward")


def test_compatibility_checks_see_what_the_group_reads(monkeypatch):
    seen = {}

    def check(context):
        seen["targets"] = [t.path for t in context.targets]
        seen["reads"] = context.reads
        return tpa.CompatibilityResult(True)

    monkeypatch.setattr(lib, "check", check, raising=False)
    g = group(
        "stored",
        replace_stored(f"{LIB}.Holder", "core", f"{LIB}.core", f"{LIB}.ours",
                       callers=f"{LIB}.Holder.run"),
        compatibility_check=f"{LIB}.check",
    )
    assert tpa.check(groups=[g]).ok
    assert seen == {
        "targets": [f"{LIB}.Holder.core", f"{LIB}.core"],
        "reads": (f"{LIB}.Holder.__init__", f"{LIB}.Holder.run"),
    }


def test_generated_evidence_covers_the_code_relied_on_and_a_change_blocks():
    """turbo-physai generate records the function and the __init__ storing it; a config whose
    hashes no longer match blocks (overrideable, as for replace)."""
    from turbo_physai.config.generator import evidence

    g = stored()
    trust = evidence(g)
    assert set(trust.source_hashes) == {f"{LIB}.core", f"{LIB}.Holder.__init__"}
    config = tpa.OptimizationConfig((tpa.GroupSelection("stored", trust=trust),))
    result = tpa.check(config, groups=[g]).group("stored")
    assert result.decision == "apply"
    assert [c.message for c in result.checks if c.code == "source.identity"] == [
        f"{LIB}.core", f"{LIB}.Holder.__init__"]
    stale = tpa.Trust({f"{LIB}.Holder.__init__": ("source-v1:" + "0" * 64,)})
    config = tpa.OptimizationConfig((tpa.GroupSelection("stored", trust=stale),))
    result = tpa.check(config, groups=[g]).group("stored")
    assert result.reasons == ["source.identity"]
    assert f"{LIB}.Holder.__init__ changed since the config was generated" in str(
        result.to_dict()["checks"])
    assert tpa.check(config, groups=[g], force_groups=["stored"]).group("stored").decision == (
        "apply")


torch = pytest.importorskip("torch")


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)
        self.core = core  # by its global name, as replace_stored checks

    def forward(self, x):
        return self.core(self.proj(x))[1]


def scaled(x, scale=1):
    return ("ours", x * 2)


# Dynamo before torch 2.13 breaks the graph at the descriptor's instance-dict read (values
# right; measured on 2.11): one graph is asserted from 2.13 on.
FULLGRAPH = torch.torch_version.TorchVersion(torch.__version__) >= "2.13"


def test_torch_modules_compile_through_the_descriptor():
    g = group("stored", replace_stored(f"{__name__}.Attention", "core", f"{LIB}.core",
                                       f"{__name__}.scaled"))
    module, x = Attention(), torch.randn(2, 3)
    with tpa.applied(groups=[g], strict=True):
        compiled = torch.compile(module, backend="eager", fullgraph=FULLGRAPH)
        torch.testing.assert_close(compiled(x), module.proj(x) * 2)
        module.core = torch.nn.Identity()  # a submodule at that name: torch keeps it apart
        assert module.core is module._modules["core"]
    del module._modules["core"]
    torch._dynamo.reset()
    assert "core" not in vars(Attention)
    module.core = lib.core
    torch.testing.assert_close(module(x), module.proj(x))


class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.core = core

    def forward(self, x):
        return self.core(x, self.scale)[1]


def doubled(x, scale=1):
    return ("ours", x * scale * 2)


def small_scale(x, scale=1):
    return scale < 10


@pytest.mark.parametrize(("scale", "factor"), [(3, 2), (30, 1)])
def test_a_runtime_condition_is_traced_by_torch_compile(scale, factor):
    """The descriptor hands out the Dispatcher unbound, which dynamo traces through its Python
    twin (engine/traced_dispatch.py), condition included (fullgraph=True raises on any break;
    torch 2.13 on)."""
    g = group("stored", replace_stored(f"{__name__}.Scaled", "core", f"{LIB}.core",
                                       f"{__name__}.doubled",
                                       runtime_condition=f"{__name__}.small_scale"))
    module, x = Scaled(scale), torch.randn(4)
    torch._dynamo.reset()
    with tpa.applied(groups=[g], strict=True):
        compiled = torch.compile(module, backend="eager", fullgraph=FULLGRAPH)
        torch.testing.assert_close(compiled(x), x * scale * factor)
        torch.testing.assert_close(module(x), x * scale * factor)  # eager: the Dispatcher
    torch._dynamo.reset()
