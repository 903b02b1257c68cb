"""The csx accelerator, and how Lightning resolves the "csx" names after `import cs_lightning`."""

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.accelerators import AcceleratorRegistry, CPUAccelerator, CUDAAccelerator
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, StrategyRegistry
from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector

import cs_lightning
from cs_lightning import CSXAccelerator, CSXDDPStrategy, CSXStrategy


def _trainer(**kwargs) -> Trainer:
    return Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, **kwargs)


@pytest.fixture()
def cuda_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend a CUDA device exists (the suite is CPU-only), as Lightning's own tests do."""
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    monkeypatch.setattr(CUDAAccelerator, "auto_device_count", staticmethod(lambda: 1))


def test_import_registers_the_csx_names() -> None:
    assert AcceleratorRegistry["csx"]["accelerator"] is CSXAccelerator
    assert StrategyRegistry["csx"]["strategy"] is CSXStrategy
    assert StrategyRegistry["csx_ddp"]["strategy"] is CSXDDPStrategy


def test_registering_twice_changes_nothing() -> None:
    before = (dict(AcceleratorRegistry), dict(StrategyRegistry))
    hooks = (_AcceleratorConnector._choose_strategy, _AcceleratorConnector._init_strategy)
    cs_lightning._register()
    assert (_AcceleratorConnector._choose_strategy, _AcceleratorConnector._init_strategy) == hooks  # not wrapped twice
    trainer = _trainer(strategy="csx")
    assert isinstance(trainer.strategy, CSXStrategy)
    assert (AcceleratorRegistry.keys(), StrategyRegistry.keys()) == (before[0].keys(), before[1].keys())


def test_other_strategies_are_left_as_lightning_makes_them() -> None:
    trainer = _trainer()
    assert type(trainer.strategy) is SingleDeviceStrategy and type(trainer.accelerator) is CPUAccelerator
    trainer = _trainer(strategy="ddp", accelerator="cpu", devices=2)
    assert type(trainer.strategy) is DDPStrategy and type(trainer.accelerator) is CPUAccelerator


def test_a_lightning_without_the_hooked_connector_methods_warns_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(_AcceleratorConnector, "_choose_strategy")
    with pytest.warns(UserWarning, match=r"lightning 2\.\d+\.\d+.*has no _choose_strategy.*strategy='csx_ddp'"):
        cs_lightning._register()


def test_a_lightning_whose_connector_changed_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    fallback = _AcceleratorConnector._check_strategy_and_fallback

    def without_num_nodes_flag(self: _AcceleratorConnector) -> None:
        fallback(self)
        del self._num_nodes_flag

    monkeypatch.setattr(_AcceleratorConnector, "_check_strategy_and_fallback", without_num_nodes_flag)
    with pytest.raises(RuntimeError, match=r"connector has changed .*_num_nodes_flag"):
        _trainer(strategy="csx")


def test_strategy_csx_alone_implies_the_csx_accelerator_backed_by_cpu() -> None:
    trainer = _trainer(strategy="csx")
    assert isinstance(trainer.strategy, CSXStrategy)
    assert isinstance(trainer.accelerator, CSXAccelerator)
    assert trainer.accelerator.backing == "cpu"
    assert trainer.strategy.root_device == torch.device("cpu")


def test_accelerator_csx_alone_implies_the_csx_strategy() -> None:
    trainer = _trainer(accelerator="csx")
    assert isinstance(trainer.strategy, CSXStrategy)
    assert isinstance(trainer.accelerator, CSXAccelerator)


def test_devices_n_means_n_systems_data_parallel() -> None:
    trainer = _trainer(strategy="csx", devices=2)
    assert type(trainer.strategy) is CSXDDPStrategy
    assert trainer.strategy.parallel_devices == [torch.device("cpu")] * 2
    assert trainer.strategy.world_size == 2
    assert isinstance(trainer.accelerator, CSXAccelerator)


def test_a_configured_single_system_cannot_silently_run_on_two_devices() -> None:
    with pytest.raises(ValueError, match=r"devices=2.*CSXDDPStrategy"):
        _trainer(strategy=CSXStrategy(compile=True), devices=2)


def test_ddp_sibling_keeps_its_options() -> None:
    trainer = _trainer(strategy=CSXDDPStrategy(trace_check=False, init_mode="independent"), devices=2)
    assert trainer.strategy.csx_options["trace_check"] is False
    assert trainer.strategy.csx_options["init_mode"] == "independent"


def test_explicit_cpu_accelerator_backs_the_systems() -> None:
    trainer = _trainer(strategy="csx", accelerator="cpu")
    assert isinstance(trainer.accelerator, CSXAccelerator) and trainer.accelerator.backing == "cpu"


def test_bf16_mixed_autocasts_on_the_backing_device() -> None:
    trainer = _trainer(accelerator="csx", precision="bf16-mixed")
    assert trainer.precision_plugin.device == "cpu"


def test_backed_by_cuda_when_present(cuda_present: None) -> None:
    assert CSXAccelerator().backing == "cuda"
    assert CSXAccelerator("cpu").backing == "cpu"
    assert CSXStrategy().root_device == torch.device("cuda", 0)


def test_unknown_backing_is_rejected_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"backing='tpu'.*'cpu' or 'cuda'"):
        CSXAccelerator("tpu")


def test_device_parsing_is_the_backing_devices() -> None:
    assert CSXAccelerator.parse_devices(3) == 3
    assert CSXAccelerator.get_parallel_devices(2) == [torch.device("cpu")] * 2
    assert CSXAccelerator.auto_device_count() == 1
    assert CSXAccelerator.is_available()
    assert CSXAccelerator.name() == "csx"
