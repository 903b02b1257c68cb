"""One YAML reader, one block parser, and key paths carried as tuples, formatted in one place."""

import pickle
from pathlib import Path

import pytest
import torch

from cs_lightning.config_blocks import Block, check_arguments, parse_block, read_yaml
from cs_lightning.convert import convert
from cs_lightning.errors import ConfigError, ConfigTypeError, format_key_path
from cs_lightning.optimizers import optimizer_factory
from cs_lightning.schedulers import build

NEGATIVE = {
    "SequentialLR": {
        "schedulers": [
            {"ConstantLR": {"learning_rate": 0.01, "total_iters": 4}},
            {"PiecewiseConstantLR": {"learning_rates": [0.01, -0.1], "milestones": [2]}},
        ]
    }
}


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def test_a_nested_bad_value_carries_its_key_path_as_a_tuple_formatted_once() -> None:
    with pytest.raises(ConfigError) as info:
        build(
            [{"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 2}}, NEGATIVE],
            _optimizer(),
        )
    error = info.value
    assert error.path == ("schedulers", 1, "SequentialLR", "schedulers", 1, "PiecewiseConstantLR", "learning_rates")
    assert error.key == "schedulers[1].SequentialLR.schedulers[1].PiecewiseConstantLR.learning_rates"
    assert str(error) == f"{error.key}: {error.message}"
    assert error.message.startswith("got [0.01, -0.1]")  # the value's own key names the argument
    assert "schedulers[" not in error.message  # the path is in the message once, from format_key_path


def test_a_class_path_block_is_named_by_its_init_args_key() -> None:
    spec = {
        "class_path": "cs_lightning.schedulers.SequentialLR",
        "init_args": {
            "schedulers": [{"class_path": "cs_lightning.schedulers.LinearLR", "init_args": {"warmup": 3}}],
        },
    }
    with pytest.raises(ConfigError) as info:
        build([spec], _optimizer())
    assert info.value.path == ("schedulers", 0, "init_args", "schedulers", 0, "init_args", "warmup")
    assert info.value.message.startswith("LinearLR has no argument 'warmup'")


def test_convert_puts_the_same_path_under_the_model_zoo_key() -> None:
    source = {"trainer": {"init": {"optimizer": {"SGD": {"lr": 0.1}}, "schedulers": [NEGATIVE]}}}
    with pytest.raises(ConfigError) as info:
        convert(source)
    assert info.value.path == (
        "trainer",
        "init",
        "schedulers",
        0,
        "SequentialLR",
        "schedulers",
        1,
        "PiecewiseConstantLR",
        "learning_rates",
    )


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), ""),
        (("optimizer",), "optimizer"),
        (("imports", 2), "imports[2]"),
        (("schedulers", 0, "SequentialLR", "schedulers", 1), "schedulers[0].SequentialLR.schedulers[1]"),
        (("--out",), "--out"),
    ],
)
def test_format_key_path(path, text: str) -> None:
    assert format_key_path(path) == text


def test_under_lengthens_the_path_and_keeps_the_class() -> None:
    inner = ConfigTypeError(("LinearLR",), "LinearLR needs total_iters")
    outer = inner.under("schedulers", 3)
    assert type(outer) is ConfigTypeError and isinstance(outer, TypeError) and isinstance(outer, ValueError)
    assert (outer.path, str(outer)) == (
        ("schedulers", 3, "LinearLR"),
        "schedulers[3].LinearLR: LinearLR needs total_iters",
    )
    assert inner.path == ("LinearLR",)
    copied = pickle.loads(pickle.dumps(outer))
    assert (type(copied), copied.path, copied.message) == (ConfigTypeError, outer.path, outer.message)
    assert str(ConfigError((), "no key")) == "no key" and ConfigError("--out", "x").path == ("--out",)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"AdamW": {"lr": 0.1}}, Block("AdamW", {"lr": 0.1}, ("optimizer", "AdamW"))),
        ({"AdamW": None}, Block("AdamW", {}, ("optimizer", "AdamW"))),
        (
            {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.1}},
            Block("torch.optim.AdamW", {"lr": 0.1}, ("optimizer", "init_args")),
        ),
        ({"class_path": "torch.optim.AdamW"}, Block("torch.optim.AdamW", {}, ("optimizer", "init_args"))),
        ("AdamW", Block("AdamW", {}, ("optimizer",))),
    ],
)
def test_parse_block_reads_the_three_spellings(spec, expected: Block) -> None:
    block = parse_block(spec, ("optimizer",), "optimizer", bare_name_ok=True)
    assert block == expected
    block.args["extra"] = 1  # a copy: the parsed YAML is never changed
    assert "extra" not in str(spec)


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ("LinearLR", ("schedulers", 0), "expected a mapping such as {Name: {argument: value}}, got 'LinearLR'"),
        ({"A": {}, "B": {}}, ("schedulers", 0), "expected exactly one scheduler name, got keys ['A', 'B']"),
        ({"LinearLR": 3}, ("schedulers", 0, "LinearLR"), "expected a mapping of arguments, got 3"),
        ({"class_path": "x.Y", "init_args": [1]}, ("schedulers", 0, "init_args"), "expected a mapping of arguments"),
        ({"class_path": "x.Y", "args": {}}, ("schedulers", 0, "args"), "unexpected key next to class_path"),
        ({"class_path": 3}, ("schedulers", 0, "class_path"), "expected a dotted class path, got 3"),
    ],
)
def test_parse_block_names_the_key_path_of_each_mistake(spec, path, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_block(spec, ("schedulers", 0), "scheduler")
    assert info.value.path == path
    assert words in info.value.message and "fix:" in info.value.message


def test_read_yaml_reads_numbers_as_fit_does_and_refuses_a_repeated_key(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("lr: 3e-4\nsteps: [1, 2]\n")
    assert read_yaml(tmp_path / "ok.yaml", "config") == ({"lr": 3e-4, "steps": [1, 2]}, [])
    (tmp_path / "twice.yaml").write_text("a: 1\nb:\n  c: 2\n  c: 3\na: 1\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(tmp_path / "twice.yaml", ("config", 0))
    assert str(info.value) == (
        f"config[0]: {str(tmp_path / 'twice.yaml')!r} gives key 'c' twice, at lines 3 and 4; fix: keep one of them"
    )
    (tmp_path / "same.yaml").write_text("a: 1\na: 1\n")
    assert read_yaml(tmp_path / "same.yaml", "source", same_value_ok=True) == (
        {"a": 1},
        [f"{tmp_path / 'same.yaml'} gives key 'a' twice, at lines 1 and 2, with the same value"],
    )


class _Stepper:
    """A constructor as an optimizer's or a scheduler's: what the caller passes first, then the block's."""

    def __init__(self, params, lr, momentum=0.0, *, nesterov=False):
        pass


@pytest.mark.parametrize(
    ("args", "key", "message"),
    [
        (
            {"lr": 0.1, "momentun": 0.9},
            ("opt", "momentun"),
            "_Stepper has no argument 'momentun'; fix: did you mean momentum?",
        ),
        (
            {"lr": 0.1, "xyz": 1},
            ("opt", "xyz"),
            "_Stepper has no argument 'xyz'; fix: _Stepper takes lr, momentum, nesterov",
        ),
        (
            {"lr": 0.1, "params": []},
            ("opt", "params"),
            "_Stepper has no argument 'params'; fix: remove it: cs-lightning passes it itself",
        ),
    ],
)
def test_an_unknown_argument_is_refused_at_its_own_key(args, key, message) -> None:
    with pytest.raises(ConfigError) as info:
        check_arguments(_Stepper, args, ("opt",), ours=["params"])
    assert (info.value.path, info.value.message) == (key, message)


def test_a_missing_argument_is_a_type_error_at_the_block_unless_the_caller_fills_it() -> None:
    with pytest.raises(ConfigTypeError) as info:
        check_arguments(_Stepper, {"momentum": 0.9}, ("opt",), ours=["params"])
    assert (info.value.path, info.value.message) == (("opt",), "_Stepper needs lr; fix: add lr: <value>")
    check_arguments(_Stepper, {"momentum": 0.9}, ("opt",), ours=["params"], filled=["lr"])


def test_a_class_taking_keyword_arguments_takes_any_name_but_still_needs_its_own() -> None:
    class Forwarding(_Stepper):
        def __init__(self, params, lr, **kwargs):
            super().__init__(params, lr, **kwargs)

    check_arguments(Forwarding, {"lr": 0.1, "dampening": 0.5}, ("opt",), ours=["params"])
    with pytest.raises(ConfigTypeError, match="Forwarding needs lr"):
        check_arguments(Forwarding, {"dampening": 0.5}, ("opt",), ours=["params"])
    # but not YAML's one word of {lr:0.1}: lr would stay its default
    with pytest.raises(ConfigError, match=r"^opt.lr:0.1: Forwarding has no argument 'lr:0.1'; fix: write lr: 0.1 "):
        check_arguments(Forwarding, {"lr": 0.2, "lr:0.1": None}, ("opt",), ours=["params"])


LINEAR = {"initial_learning_rate": 0.1, "end_learning_rate": 0.0}


@pytest.mark.parametrize(
    ("build_block", "kind", "line"),
    [
        (
            lambda: optimizer_factory({"AdamW": {"lr": -1}}),
            ConfigError,
            "optimizer.AdamW: AdamW rejects {'lr': -1}: Invalid learning rate: -1; fix: correct the value",
        ),
        (  # None may be a number's value (an Optional[float]): torch's comparison refuses it here
            lambda: optimizer_factory({"AdamW": {"lr": None}}),
            ConfigTypeError,
            "optimizer.AdamW: AdamW rejects {'lr': None}: '<=' not supported between instances of 'float' and "
            "'NoneType'; fix: correct the value",
        ),
        (
            lambda: build([{"LinearLR": {**LINEAR, "total_iters": -1}}], _optimizer()),
            ConfigError,
            "schedulers[0].LinearLR.total_iters: got -1; total_iters must be >= 0; fix: correct the value",
        ),
        (
            lambda: build([{"LinearLR": {**LINEAR, "total_iters": "ten"}}], _optimizer()),
            ConfigTypeError,
            "schedulers[0].LinearLR.total_iters: got 'ten'; total_iters must be an int; fix: correct the value",
        ),
        (  # the constructor's own fix stands
            lambda: build([{"LinearLR": {**LINEAR, "total_iters": 2.5}}], _optimizer()),
            ConfigTypeError,
            "schedulers[0].LinearLR.total_iters: got 2.5; total_iters must be an int; fix: write an integer, e.g. 2",
        ),
        (  # not a value to correct: the optimizer has no weight decay
            lambda: build(
                [{"LinearWD": {"initial_val": 0.1, "end_val": 0.0, "total_iters": 4}}],
                torch.optim.Rprop([torch.nn.Parameter(torch.ones(1))]),
            ),
            ConfigError,
            "schedulers[0].LinearWD: LinearWD: param_groups[0] has no weight_decay (Rprop has no weight decay); fix: "
            "schedule the weight decay of an optimizer that has one (SGD, Adam, AdamW, ...)",
        ),
        (
            lambda: build(
                [{"SequentialLR": {"schedulers": [{"ConstantLR": {"learning_rate": 0.1}}] * 2}}], _optimizer()
            ),
            ConfigError,
            "schedulers[0].SequentialLR: SequentialLR: milestones are missing and schedulers[0] (ConstantLR) has no "
            "total_iters to infer them from; fix: give milestones (the step where each next scheduler starts)",
        ),
        (  # tags as a sorted list, not a Python set
            lambda: build(
                [
                    {
                        "SequentialLR": {
                            "schedulers": [
                                {"LinearLR": {**LINEAR, "total_iters": 2, "param_group_tags": ["b", "a"]}},
                                {"LinearLR": {**LINEAR, "total_iters": 2, "param_group_tags": "a"}},
                            ],
                            "param_group_tags": ["b", "a"],
                        }
                    }
                ],
                torch.optim.SGD([{"params": [torch.nn.Parameter(torch.ones(1))], "tags": [t]} for t in "ab"], lr=0.1),
            ),
            ConfigError,
            "schedulers[0].SequentialLR: SequentialLR: schedulers[1] (LinearLR) has param_group_tags=['a'], the parent "
            "['a', 'b']; fix: give both the same tags",
        ),
    ],
)
def test_a_constructor_refusing_a_blocks_values_is_one_line_with_a_fix_of_the_same_kind(
    build_block, kind: type, line: str
) -> None:
    """Optimizers and schedulers say it alike: a wrong kind stays a TypeError, and the line ends in a fix."""
    with pytest.raises(ConfigError) as raised:
        build_block()
    assert (type(raised.value), str(raised.value)) == (kind, line)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("model: {class_path: x\ntrainer: [1,\n", "at line 2, column 8"),
        ("trainer: {max_steps: 2\n", "at character 24"),  # one line: as a value on the command line is said
    ],
)
def test_a_yaml_syntax_error_says_where_as_the_command_lines_do(text: str, where: str, tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(ConfigError) as raised:
        read_yaml(tmp_path / "run.yaml", "config")
    assert str(raised.value) == (
        f"config: {str(tmp_path / 'run.yaml')!r} is not valid YAML (did not find expected ',' or '}}' {where}); "
        "fix: correct the YAML syntax there"
    )
