"""resolve and build: names, YAML shapes, milestone inference, key paths in errors."""

import pytest
import torch

from cs_lightning.errors import ConfigError, ConfigTypeError
from cs_lightning.schedulers import (
    ChainedScheduler,
    CosineDecayLR,
    LinearLR,
    LinearWD,
    LRScheduler,
    ScalePerParamLR,
    SequentialLR,
    SequentialWD,
    build,
    resolve,
)

WARMUP = {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 10}
DECAY = {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 30}


@pytest.fixture
def optimizer():
    return torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))], lr=1.0, weight_decay=0.1)


@pytest.mark.parametrize(
    "name", ["LinearLR", "linearlr", "LINEARLR", "Linear", "linear", "cs_lightning.schedulers.LinearLR"]
)
def test_resolve_spellings(name):
    assert resolve(name) is LinearLR


def test_resolve_keeps_aliases_apart():
    assert resolve("ChainedScheduler") is ChainedScheduler
    assert resolve("CosineAnnealingWarmRestarts").__name__ == "CosineAnnealingWarmRestarts"
    assert resolve("linearwd") is LinearWD


def test_resolve_finds_a_subclass_defined_later():
    class FlatForTestLR(LRScheduler):
        def __init__(self, optimizer, value):
            self.value = value
            super().__init__(optimizer)

        def _get_closed_form(self):
            return torch.tensor(self.value)

    assert resolve("flatfortestlr") is FlatForTestLR


def _constant_scheduler(value):
    """A custom class named ConstantForTestLR, defined anew at each call, as a notebook cell run again does."""

    class ConstantForTestLR(LRScheduler):
        def __init__(self, optimizer, last_epoch=-1):
            super().__init__(optimizer, last_epoch=last_epoch)

        def _get_closed_form(self):
            return torch.tensor(value)

    return ConstantForTestLR


def test_a_class_defined_again_resolves_to_the_one_defined_last():
    """Both stay alive (here, as an instance or a notebook's history keeps them): one path, not an ambiguity."""
    first, second = _constant_scheduler(0.1), _constant_scheduler(0.2)
    assert first.__qualname__ == second.__qualname__
    assert resolve("ConstantForTestLR") is second


def test_a_reloaded_module_resolves_to_the_class_bound_there_now(tmp_path, monkeypatch):
    """importlib.reload: the module's current class, even where an older one was defined after it."""
    import importlib

    (tmp_path / "reloaded_for_test.py").write_text(
        "import torch\n"
        "from cs_lightning.schedulers import LRScheduler\n\n\n"
        "class ReloadedForTestLR(LRScheduler):\n"
        "    def _get_closed_form(self):\n"
        "        return torch.tensor(0.1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("reloaded_for_test")
    old = module.ReloadedForTestLR
    new = importlib.reload(module).ReloadedForTestLR
    assert new is not old and resolve("ReloadedForTestLR") is new
    monkeypatch.setattr(module, "ReloadedForTestLR", old)  # bound again to the class defined first
    assert resolve("ReloadedForTestLR") is old


def test_classes_of_one_name_at_two_paths_are_ambiguous():
    class ConstantForTestLR(LRScheduler):  # another path than _constant_scheduler's class
        def _get_closed_form(self):
            return torch.tensor(0.3)

    kept = _constant_scheduler(0.1)
    with pytest.raises(ConfigError) as raised:
        resolve("ConstantForTestLR")
    assert str(raised.value) == (
        "scheduler name 'ConstantForTestLR' is ambiguous: "
        f"{__name__}._constant_scheduler.<locals>.ConstantForTestLR, "
        f"{__name__}.test_classes_of_one_name_at_two_paths_are_ambiguous.<locals>.ConstantForTestLR; "
        "fix: give the dotted path"
    )
    assert kept is not ConstantForTestLR


def test_unknown_name_lists_the_closest():
    with pytest.raises(ValueError, match="unknown scheduler 'CosineDecay LR'; fix: did you mean CosineDecayLR"):
        resolve("CosineDecay LR")


def test_dotted_path_must_be_a_scheduler():
    with pytest.raises(TypeError, match="not a closed-form scheduler"):
        resolve("torch.optim.lr_scheduler.LinearLR")
    with pytest.raises(ValueError, match="cannot be imported"):
        resolve("no_such_module.LinearLR")
    with pytest.raises(ConfigError, match=r"'\.LinearLR' cannot be imported: .* its module part, before the last dot"):
        resolve(".LinearLR")


def test_a_scheduler_taking_keyword_arguments_gets_every_argument_of_its_block(optimizer):
    """Its **kwargs take any name; they were refused as unknown arguments (an optimizer's never were)."""

    class ForwardingForTestLR(LinearLR):
        def __init__(self, optimizer, **kwargs):
            super().__init__(optimizer, **kwargs)

    (built,) = build({"ForwardingForTestLR": WARMUP}, optimizer)
    assert type(built) is ForwardingForTestLR
    assert built.values(3)[:, 0].tolist() == pytest.approx([0.0, 0.01, 0.02])


class TableForTestLR(LRScheduler):
    """A custom scheduler with a bug of its own: ``len`` of an int, after the catalogue's checks ran."""

    def __init__(self, optimizer, steps=10, last_epoch=-1):
        self.steps = steps
        super().__init__(optimizer, total_iters=steps, last_epoch=last_epoch)
        self.table = torch.ones(steps) / len(steps)

    def _get_closed_form(self):
        return torch.clamp(self._float_steps() / self.steps, max=1.0)


def test_a_bug_inside_a_custom_schedulers_constructor_keeps_its_traceback(optimizer):
    """A value the catalogue's checks refuse is one line at its key path; an error raised by the class's own
    code is a bug to fix there, not a value to correct: it propagates as raised."""
    with pytest.raises(ConfigError) as refused:
        build({"TableForTestLR": {"steps": -1}}, optimizer)
    assert str(refused.value) == (
        # its argument is steps: the refusal of the total_iters it makes of them stays at the block
        "schedulers.TableForTestLR: TableForTestLR: got total_iters=-1; total_iters must be >= 0; fix: correct the value"
    )
    with pytest.raises(TypeError) as raised:
        build({"TableForTestLR": {"steps": 5}}, optimizer)
    assert type(raised.value) is TypeError and str(raised.value) == "object of type 'int' has no len()"
    assert raised.traceback[-1].name == "__init__" and "len(steps)" in str(raised.traceback[-1].statement)


def test_a_custom_schedulers_arguments_and_closed_form_are_refused_in_one_line(optimizer):
    """What the call could not bind is refused before it, naming the argument; a closed form that
    branches in Python is refused by the catalogue, naming the class."""

    class BranchingForTestLR(LRScheduler):
        def __init__(self, optimizer, value, last_epoch=-1):
            self.value = value
            super().__init__(optimizer, last_epoch=last_epoch)

        def _get_closed_form(self):
            return self.value if self.last_epoch < 5 else 0.01

    with pytest.raises(ConfigError) as unknown:
        build({"BranchingForTestLR": {"value": 0.1, "vale": 0.1}}, optimizer)
    assert str(unknown.value) == (
        "schedulers.BranchingForTestLR.vale: BranchingForTestLR has no argument 'vale'; fix: did you mean value?"
    )
    with pytest.raises(ConfigTypeError) as missing:
        build({"BranchingForTestLR": {}}, optimizer)
    assert str(missing.value) == ("schedulers.BranchingForTestLR: needs value; fix: add value: <value>")
    with pytest.raises(
        ConfigTypeError,
        match=r"^schedulers\.BranchingForTestLR: BranchingForTestLR\._get_closed_form cannot be evaluated",
    ):
        build({"BranchingForTestLR": {"value": 0.1}}, optimizer)


def test_build_shapes(optimizer):
    (one,) = build({"LinearLR": WARMUP}, optimizer)
    assert type(one) is LinearLR and one.total_iters == 10
    lr, wd = build(
        [{"CosineDecayLR": DECAY}, {"LinearWD": {"initial_val": 0.1, "end_val": 0.0, "total_iters": 5}}], optimizer
    )
    assert (type(lr), type(wd)) == (CosineDecayLR, LinearWD)
    (jsonargparse,) = build({"class_path": "cs_lightning.schedulers.LinearLR", "init_args": WARMUP}, optimizer)
    assert type(jsonargparse) is LinearLR
    (defaults,) = build({"InverseSquareRootDecayLR": None}, optimizer)
    assert defaults.values(3)[:, 0].tolist() == [1.0, 1.0, pytest.approx(2**-0.5)]


def test_build_infers_milestones_and_checks_given_ones(optimizer):
    spec = {
        "SequentialLR": {
            "schedulers": [
                {"LinearLR": WARMUP},
                {"ConstantLR": {"learning_rate": 0.1, "total_iters": 5}},
                {"CosineDecayLR": DECAY},
            ]
        }
    }
    (sequence,) = build(spec, optimizer)
    assert type(sequence) is SequentialLR and sequence.milestones == [10, 15]
    spec["SequentialLR"]["milestones"] = [10, 20]  # ConstantLR's total_iters does not bound its stage
    (sequence,) = build(spec, optimizer)
    assert sequence.milestones == [10, 20]
    assert sequence.values([14, 19, 20])[:, 0].tolist() == [pytest.approx(0.1), pytest.approx(0.1), pytest.approx(0.1)]


def test_build_needs_lengths_to_infer(optimizer):
    spec = {
        "SequentialLR": {
            "schedulers": [
                {"StepLR": {"initial_learning_rate": 0.1, "step_size": 5, "gamma": 0.5}},
                {"CosineDecayLR": DECAY},
            ]
        }
    }
    with pytest.raises(
        ConfigError, match=r"schedulers\[0\] \(StepLR\) has no total_iters to infer them from; fix: give mil"
    ):
        build(spec, optimizer)
    spec["SequentialLR"]["milestones"] = [20]
    assert build(spec, optimizer)[0].milestones == [20]


def test_build_legacy_list(optimizer):
    legacy = [{"scheduler": "Linear", **WARMUP}, {"scheduler": "CosineDecay", **DECAY}]
    (sequence,) = build(legacy, optimizer)
    assert type(sequence) is SequentialLR and sequence.milestones == [10]
    assert [type(s) for s in sequence.schedulers] == [LinearLR, CosineDecayLR]
    (single,) = build({"scheduler": "Linear", **WARMUP}, optimizer)
    assert type(single) is LinearLR
    (wd,) = build(
        [
            {"scheduler": "LinearWD", "initial_val": 0.1, "end_val": 0.0, "total_iters": 4},
            {"scheduler": "ConstantWD", "val": 0.0},
        ],
        optimizer,
    )
    assert type(wd) is SequentialWD


def test_a_legacy_list_reads_model_zoo_1x_argument_names_and_a_2x_block_refuses_them(optimizer):
    """Model Zoo 1.x wrote `steps`/`decay_steps`; a {scheduler: Name} list is that layout, so its names are too."""
    old_names = [
        {"scheduler": "Linear", "initial_learning_rate": 0.0, "end_learning_rate": 0.1, "steps": 10},
        {"scheduler": "CosineDecay", "initial_learning_rate": 0.1, "end_learning_rate": 0.0, "decay_steps": 5},
    ]
    new_names = [
        {"scheduler": "Linear", "initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 10},
        {"scheduler": "CosineDecay", "initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 5},
    ]
    (read,) = build(old_names, optimizer)
    (expected,) = build(new_names, optimizer)
    assert read.milestones == [10] and torch.equal(read.values(20), expected.values(20))
    with pytest.raises(ConfigError, match=r"^schedulers\.LinearLR\.steps: LinearLR has no argument 'steps', "):
        build({"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "steps": 10}}, optimizer)


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"scheduler": "Linear", **WARMUP, "total_iters": -5}, r"schedulers\.total_iters"),
        (
            [{"scheduler": "Linear", "initial_learning_rate": 0.1, "end_learning_rate": 0.0, "steps": -5}],
            r"schedulers\[0\]\.steps",
        ),
        ([{"scheduler": "Linear", **WARMUP}, {"scheduler": "CosineDecay", **DECAY, "foo": 1}], r"schedulers\[1\]\.foo"),
    ],
)
def test_a_legacy_list_is_refused_at_the_key_as_written(optimizer, spec, key):
    """Not at the {Name: {args}} block's key that it is built as (`schedulers[0].LinearLR.total_iters`)."""
    with pytest.raises(ConfigError, match=f"^{key}: "):
        build(spec, optimizer)


def test_build_nested_and_chained_and_tags():
    groups = [
        {"params": [torch.nn.Parameter(torch.ones(1))], "tags": {"decay"}, "adjust_learning_rate": 0.5},
        {"params": [torch.nn.Parameter(torch.ones(1))], "lr": 0.3},
    ]
    optimizer = torch.optim.SGD(groups, lr=1.0)
    spec = {
        "ScalePerParamLR": {
            "param_group_tags": "decay",
            "scheduler": {
                "ChainedScheduler": {
                    "schedulers": [
                        {"LinearLR": WARMUP},
                        {"StepLR": {"initial_learning_rate": 1.0, "step_size": 5, "gamma": 0.5}},
                    ]
                }
            },
        }
    }
    (scaled,) = build(spec, optimizer)  # children inherit the parent's tags
    assert type(scaled) is ScalePerParamLR and type(scaled.scheduler) is ChainedScheduler
    values = scaled.values(12)
    assert values[:, 0].tolist() == pytest.approx(
        [0.5 * min(k, 10) / 100 * 0.5 ** (k // 5) for k in range(12)], rel=1e-6
    )
    assert torch.isnan(values[:, 1]).all() and optimizer.param_groups[1]["lr"] == 0.3


@pytest.mark.parametrize(
    "spec,error,message",
    [
        (
            {"LinearLR": {**WARMUP, "total_iter": 5}},
            ConfigError,
            r"^schedulers\.LinearLR\.total_iter: LinearLR has no argument 'total_iter'; fix: did you mean total_iters\?$",
        ),
        (
            {"LinearLR": {**WARMUP, "optimizer": None}},
            ConfigError,
            r"^schedulers\.LinearLR\.optimizer: LinearLR has no argument 'optimizer'; fix: remove it: cs-lightning "
            "passes it itself$",
        ),
        (
            {"LinerLR": WARMUP},
            ConfigError,
            r"schedulers\.LinerLR: unknown scheduler 'LinerLR'; fix: did you mean LinearLR",
        ),
        ({"LinearLR": WARMUP, "CosineDecayLR": DECAY}, ConfigError, "one per mapping"),
        ({"LinearLR": [1, 2]}, ConfigError, r"schedulers\.LinearLR: expected a mapping of arguments, got \[1, 2\]"),
        (
            [{"LinearLR": WARMUP}, {"CosineDecayLR": {**DECAY, "total_iters": 0}}],
            ConfigError,
            r"schedulers\[1\]\.CosineDecayLR\.total_iters: got 0",
        ),
        (
            {
                "SequentialLR": {
                    "schedulers": [
                        {"LinearLR": WARMUP},
                        {"StepLR": {"initial_learning_rate": 0.1, "step_size": -1, "gamma": 0.5}},
                    ],
                    "milestones": [10],
                }
            },
            ConfigError,
            r"schedulers\.SequentialLR\.schedulers\[1\]\.StepLR\.step_size: got -1",
        ),
        (
            {"SequentialLR": {"schedulers": {"LinearLR": WARMUP}}},
            ConfigError,
            r"schedulers\.SequentialLR\.schedulers: got .*; give a list",
        ),
        (
            {"LinearLR": {"initial_learning_rate": 0.0}},
            TypeError,
            r"schedulers\.LinearLR: needs end_learning_rate, total_iters; fix: add end_learning_rate: <value>",
        ),
        (  # checked as the catalogue checks numbers (float() of it raised ValueError)
            {"GroupScaledLR": {"scheduler": {"LinearLR": WARMUP}, "scales": ["x"]}},
            ConfigTypeError,
            r"^schedulers\.GroupScaledLR: GroupScaledLR: got scales\[0\]='x'; scales\[0\] must be a number; "
            "fix: correct the value$",
        ),
        (
            [{"scheduler": "Lineer", **WARMUP}, {"scheduler": "CosineDecay", **DECAY}],
            ConfigError,
            r"schedulers\[0\]\.scheduler: unknown scheduler 'Lineer'; fix: did you mean .*LinearLR",
        ),
    ],
)
def test_build_errors_name_the_key_path(optimizer, spec, error, message):
    with pytest.raises(error, match=message):
        build(spec, optimizer)


def test_nested_sequences_infer_their_milestones(optimizer):
    spec = {
        "SequentialLR": {
            "schedulers": [
                {
                    "SequentialLR": {
                        "schedulers": [{"LinearLR": WARMUP}, {"ConstantLR": {"learning_rate": 0.1, "total_iters": 5}}]
                    }
                },
                {"CosineDecayLR": DECAY},
            ]
        }
    }
    (outer,) = build(spec, optimizer)
    assert outer.milestones == [15] and outer.schedulers[0].milestones == [10]
    assert outer.total_iters == 45
    values = outer.values(50)[:, 0]
    assert values[12].item() == pytest.approx(0.1) and values[15].item() == pytest.approx(0.1)
    assert values[30].item() == pytest.approx(0.05, rel=1e-6)  # halfway down the cosine


TWO_WRITERS = (
    "CosineDecayLR sets 'lr' of param group 0 (untagged), as schedulers[0] (LinearLR) does, so only the later "
    "would apply; fix: compose them in one SequentialLR (one after the other) or ChainedScheduler (multiplied), "
    "or give them param_group_tags of different param groups"
)


def test_two_schedulers_of_a_list_setting_one_value_are_refused(optimizer):
    """Each step writes both, so the later wins (as in cerebras.pytorch 2.10): refused where it is written."""
    spec = [{"LinearLR": WARMUP}, {"CosineDecayLR": DECAY}]
    with pytest.raises(ConfigError) as raised:
        build(spec, optimizer)
    assert str(raised.value) == f"schedulers[1]: {TWO_WRITERS}"
    tagged = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))], "tags": {"decoder"}}], lr=0.1)
    with pytest.raises(ConfigError, match=r"^schedulers\[1\]: .* of param group 0 \(tagged \['decoder'\]\)"):
        build([{"LinearLR": {**WARMUP, "param_group_tags": "decoder"}}, {"CosineDecayLR": DECAY}], tagged)


def test_schedulers_of_different_values_or_groups_stand_side_by_side():
    optimizer = torch.optim.SGD(
        [
            {"params": [torch.nn.Parameter(torch.zeros(1))], "tags": {"decoder"}},
            {"params": [torch.nn.Parameter(torch.zeros(1))], "tags": {"embedding"}},
        ],
        lr=0.1,
        weight_decay=0.01,
    )
    wd = {"CosineDecayWD": {"initial_val": 0.01, "end_val": 0.0, "total_iters": 30}}
    lr, decay = build([{"LinearLR": WARMUP}, wd], optimizer)
    assert (lr.param_group_key, decay.param_group_key) == ("lr", "weight_decay")
    tags = [
        {"LinearLR": {**WARMUP, "param_group_tags": "decoder"}},
        {"CosineDecayLR": {**DECAY, "param_group_tags": "embedding"}},
    ]
    first, second = build(tags, optimizer)
    assert (first._targets, second._targets) == ([0], [1])
    (sequence,) = build([{"SequentialLR": {"schedulers": [{"LinearLR": WARMUP}, {"CosineDecayLR": DECAY}]}}], optimizer)
    assert sequence.milestones == [10]  # children of one schedule set the same value, one at a time


def test_a_yaml_milestone_cutting_a_warmup_short_is_warned_of_once(optimizer):
    """As cerebras.pytorch runs it (the value jumps at the milestone), but in a config almost never meant;
    Python's SequentialLR, which torch schedules convert to, says nothing."""
    import warnings

    def spec(milestones):
        children = [
            {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 4}},
            {"CosineDecayLR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 10}},
        ]
        return {"SequentialLR": {"schedulers": children, "milestones": milestones}}

    with pytest.warns(UserWarning) as warned:
        build(spec([1]), optimizer)
    assert [str(w.message) for w in warned] == [
        "schedulers.SequentialLR: milestones[0]=1 starts schedulers[1] 1 steps into schedulers[0] (LinearLR, "
        "total_iters=4), cutting it short: the value jumps there; fix: give milestones[0]=4, or leave milestones out "
        "to infer them"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(spec([4]), optimizer)  # where the warmup ends
        build(spec([6]), optimizer)  # after it: the warmup's end value holds, as a constant stage would
        SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 0.1, 4), CosineDecayLR(optimizer, 0.1, 0.0, 10)], [1])


def test_a_refused_value_is_said_at_its_own_key_only_where_the_block_holds_it(optimizer):
    """Tags a child inherits from its SequentialLR are refused at the child's block, not at a key it lacks."""
    tags = ["a", "a"]
    linear = {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 5}
    with pytest.raises(ConfigError) as own:
        build({"LinearLR": {**linear, "param_group_tags": tags}}, optimizer)
    assert own.value.key == "schedulers.LinearLR.param_group_tags"
    assert own.value.message.startswith("got ['a', 'a']; each tag may appear once")
    children = [{"LinearLR": linear}, {"ConstantLR": {"learning_rate": 0.1}}]
    with pytest.raises(ConfigError) as inherited:
        build({"SequentialLR": {"param_group_tags": tags, "schedulers": children}}, optimizer)
    assert inherited.value.key == "schedulers.SequentialLR.schedulers[0].LinearLR"
    assert inherited.value.message.startswith("LinearLR: got param_group_tags=['a', 'a']")
