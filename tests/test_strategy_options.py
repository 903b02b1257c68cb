"""The CS-X options have one source (CSXOptions); nothing depends on docstrings; renamed names still work, warning."""

import dataclasses
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from cs_lightning import CSXAccelerator, CSXDDPStrategy, CSXFSDPStrategy, CSXStrategy
from cs_lightning.strategies import CSX_OPTION_NAMES, CSXOptions, CSXSystemMixin

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_strategy_takes_and_reports_exactly_the_listed_options() -> None:
    given = {"trace_check": False, "compile": True, "compile_backend": "eager", "init_mode": "independent"}
    given["strict_schedulers"] = True
    assert set(given) == set(CSX_OPTION_NAMES) == {f.name for f in dataclasses.fields(CSXOptions)}
    for cls in (CSXStrategy, CSXDDPStrategy, CSXFSDPStrategy):
        strategy = cls(**given)
        assert strategy.csx_options == given
        assert strategy.options == CSXOptions(**given)
        assert strategy.init_mode == "independent" and strategy.trace_check is False  # readable by name too
    assert CSXStrategy().csx_options == dataclasses.asdict(CSXOptions())


def test_the_readme_lists_exactly_the_options() -> None:
    bullet = re.search(r"^\* Options\b(.*?)(?=^\* )", README.read_text(), re.S | re.M)
    assert bullet is not None, "README.md has no '* Options' bullet"
    assert set(re.findall(r"`(?:CSXStrategy\()?(\w+)=", bullet.group(1))) == set(CSX_OPTION_NAMES)


def test_the_options_are_checked_naming_the_argument() -> None:
    with pytest.raises(ValueError, match=r"init_mode='lazy' is not supported; use one of \('exact', 'independent'\)"):
        CSXOptions(init_mode="lazy")
    for typed in ("exct", "EXACT"):
        with pytest.raises(ValueError, match=rf"^init_mode='{typed}' is not supported; did you mean 'exact'\? use one"):
            CSXStrategy(init_mode=typed)
    with pytest.raises(TypeError, match=r"strict_schedulers=1 must be a bool"):
        CSXDDPStrategy(strict_schedulers=1)


@pytest.mark.parametrize(
    ("device", "why"),
    [("xyz", "is not a torch device"), (1.5, "is not a torch device"), ("meta", "is not a device a CS-X runs on")],
)
def test_a_device_is_checked_as_the_strategy_is_built(device: object, why: str) -> None:
    """Lightning took any value and failed only in fit (an AttributeError, or 'Device should be CPU')."""
    with pytest.raises(ValueError, match=rf"^device={device!r} {why}.*; give 'cpu' or 'cuda:N', or leave it unset"):
        CSXStrategy(device=device)  # type: ignore[arg-type]  # the wrong type is the test
    cuda = f"cuda:{torch.cuda.device_count()}"  # one past the last: none on a CPU machine
    with pytest.raises(ValueError, match=rf"device='{cuda}' is not a device a CS-X runs on here"):
        CSXStrategy(device=cuda)
    assert CSXStrategy(device="cpu:0").root_device == torch.device("cpu:0")


def test_the_old_mixin_name_is_the_same_class_with_a_deprecation_warning() -> None:
    import cs_lightning.strategies as strategies

    with pytest.warns(DeprecationWarning, match=r"CSXSystem is deprecated.*CSXSystemMixin"):
        assert strategies.CSXSystem is CSXSystemMixin
    with pytest.raises(AttributeError, match="CSXNothing"):
        _ = strategies.CSXNothing


def test_registration_and_a_csx_trainer_work_with_docstrings_stripped() -> None:
    code = (
        "import cs_lightning, lightning.pytorch as pl\n"
        "from lightning.pytorch.accelerators import AcceleratorRegistry\n"
        "from lightning.pytorch.strategies import StrategyRegistry\n"
        "assert cs_lightning.CSXStrategy.__doc__ is None\n"
        "trainer = pl.Trainer(strategy='csx', accelerator='cpu', logger=False, enable_checkpointing=False)\n"
        "print(type(trainer.strategy).__name__, type(trainer.accelerator).__name__)\n"
        "print(StrategyRegistry['csx']['description'])\n"
        "print(AcceleratorRegistry['csx']['description'])\n"
    )
    run = subprocess.run([sys.executable, "-OO", "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "CSXStrategy CSXAccelerator",
        CSXStrategy.description,
        CSXAccelerator.description,
    ]


def test_the_cli_offers_every_option_with_its_type_default_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    from lightning.pytorch.cli import LightningCLI
    from lightning_models import Regressor

    for strategy in ("cs_lightning.CSXStrategy", "cs_lightning.CSXDDPStrategy"):
        with pytest.raises(SystemExit):
            LightningCLI(Regressor, run=False, args=["--trainer.strategy.help", strategy], save_config_callback=None)
        shown = " ".join(capsys.readouterr().out.split())
        for option in dataclasses.fields(CSXOptions):
            assert f"--trainer.strategy.{option.name} " in shown, (strategy, option.name)
            assert " ".join(option.metadata["help"].split()) in shown, (strategy, option.name)
        assert "(type: bool, default: True)" in shown and "default: exact)" in shown
    cli = LightningCLI(
        Regressor,
        run=False,
        args=[
            "--trainer.strategy=cs_lightning.CSXStrategy",
            "--trainer.strategy.trace_check=false",
            "--trainer.strategy.compile_backend=eager",
        ],
        save_config_callback=None,
    )
    assert cli.trainer.strategy.csx_options == {
        **dataclasses.asdict(CSXOptions()),
        "trace_check": False,
        "compile_backend": "eager",
    }


@pytest.mark.parametrize("cls", [CSXStrategy, CSXDDPStrategy, CSXFSDPStrategy])
def test_a_misspelled_option_is_named_with_the_closest_one(cls: type) -> None:
    with pytest.raises(
        TypeError,
        match=rf"^{cls.__name__} got an unexpected keyword argument 'trace_chek'; did you mean 'trace_check'\?",
    ):
        cls(trace_chek=False)


@pytest.mark.parametrize(
    ("cls", "name", "takers"),
    [
        (CSXDDPStrategy, "state_dict_type", "CSXFSDPStrategy (csx_fsdp); fix: use it"),
        (CSXStrategy, "process_group_backend", "CSXDDPStrategy (csx_ddp) and CSXFSDPStrategy (csx_fsdp); fix: use one"),
    ],
)
def test_an_argument_of_another_csx_strategy_is_said_to_be_its(cls: type, name: str, takers: str) -> None:
    class Tuned(CSXFSDPStrategy):  # a user's subclass is not named among the csx strategies
        pass

    with pytest.raises(
        TypeError, match=rf"'{name}'; {name} is an argument of {re.escape(takers)}.*, or give the CS-X options "
    ):
        cls(**{name: "full"})


def test_the_lightning_strategies_own_arguments_still_pass_through() -> None:
    assert CSXStrategy(device="cpu", trace_check=False).root_device == torch.device("cpu")
    ddp = CSXDDPStrategy(find_unused_parameters=True, process_group_backend="gloo")  # DDPStrategy's, DDP's own
    assert ddp._ddp_kwargs == {"find_unused_parameters": True} and ddp.process_group_backend == "gloo"
    assert CSXFSDPStrategy(state_dict_type="full", timeout=timedelta(seconds=5))._timeout == timedelta(seconds=5)
    with pytest.raises(TypeError, match=r"'state_dict_typ'; did you mean 'state_dict_type'\?"):
        CSXFSDPStrategy(state_dict_typ="full")


@pytest.mark.parametrize("cls", [CSXDDPStrategy, CSXFSDPStrategy])
@pytest.mark.parametrize(
    ("timeout", "fix"),
    [(5, "timeout=timedelta(seconds=5)"), ("30", "a datetime.timedelta"), (True, "a datetime.timedelta")],
)
def test_a_timeout_that_is_no_timedelta_is_refused_as_the_strategy_is_built(
    cls: type, timeout: object, fix: str
) -> None:
    """torch would refuse it once the processes had started, in a traceback per rank."""
    with pytest.raises(
        TypeError, match=rf"^{cls.__name__} got timeout={timeout!r}: .* datetime\.timedelta; pass {re.escape(fix)}$"
    ):
        cls(timeout=timeout)
    assert cls(timeout=None)._timeout is None


@pytest.mark.parametrize("name", ["data_parallel_size", "tensor_parallel_size", "save_distributed_checkpoint"])
def test_csx_fsdp_refuses_the_arguments_it_decides_itself(name: str) -> None:
    """ModelParallelStrategy takes them, but csx_fsdp would ignore them: refused, not silently dropped."""
    with pytest.raises(ValueError, match=rf"^CSXFSDPStrategy sets {name} itself \(.*\); remove {name}=2\.$"):
        CSXFSDPStrategy(**{name: 2})
