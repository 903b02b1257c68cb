"""Importing never breaks: the schedulers and deferred init need neither Lightning nor jsonargparse, and a Lightning
whose private connector moved gets one warning, not a broken package."""

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def test_schedulers_and_deferred_work_without_lightning() -> None:
    done = _run("""
        import sys
        sys.modules["lightning"] = sys.modules["pytorch_lightning"] = None  # import lightning raises ImportError
        import torch
        import cs_lightning
        from cs_lightning.deferred import deferred_init, materialize
        from cs_lightning.schedulers import CosineDecayLR

        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        print(CosineDecayLR(optimizer, initial_learning_rate=1.0, end_learning_rate=0.0, total_iters=10).values(11).flatten()[5].item())
        torch.manual_seed(0)
        model = materialize(deferred_init(lambda: torch.nn.Linear(3, 2)))
        torch.manual_seed(0)
        print(torch.equal(model.weight, torch.nn.Linear(3, 2).weight))
        try:
            cs_lightning.CSXStrategy
        except ImportError as error:
            print(error)
        print("lightning" in sys.modules and sys.modules["lightning"] is None)
        print("cs_lightning.trace" in sys.modules)  # the recorder's user_code module is a leaf
    """)
    assert done.returncode == 0, done.stderr
    half, exact, error, blocked, traced = done.stdout.splitlines()
    assert abs(float(half) - 0.5) < 1e-6 and exact == "True" and blocked == "True" and traced == "False"
    assert error == "cs_lightning.CSXStrategy needs lightning, which is not installed: pip install lightning"


def test_schedulers_import_and_build_from_a_spec_without_jsonargparse() -> None:
    """Only the CLI reads YAML through jsonargparse: the schedulers' registry does not need it."""
    done = _run("""
        import sys

        class Refuse:  # import jsonargparse raises ImportError, as if it were not installed
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] == "jsonargparse":
                    raise ImportError(f"no module named {name!r}")

        sys.meta_path.insert(0, Refuse())
        import torch
        from cs_lightning import schedulers

        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        warmup = {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 1.0, "total_iters": 4}}
        (built,) = schedulers.build({"SequentialLR": {"schedulers": [warmup, {"ConstantLR": {"learning_rate": 0.5}}]}}, optimizer)
        print(type(built).__name__, built.values(6).flatten().tolist())
        print("jsonargparse" in sys.modules)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["SequentialLR [0.0, 0.25, 0.5, 0.75, 0.5, 0.5]", "False"]


def test_a_lightning_whose_connector_moved_gets_one_warning_and_csx_still_trains() -> None:
    done = _run("""
        import warnings
        import lightning.pytorch as pl
        import torch
        from lightning.pytorch.trainer.connectors import accelerator_connector

        del accelerator_connector._AcceleratorConnector  # as if a release moved it (the Trainer holds its own)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import cs_lightning
        print(sum("cannot teach lightning" in str(w.message) for w in caught))

        class Net(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)

            def training_step(self, batch, batch_idx):
                return self.layer(batch).square().mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = torch.utils.data.DataLoader(torch.randn(8, 2), batch_size=4)
        for strategy in (cs_lightning.CSXStrategy(), "csx"):
            trainer = pl.Trainer(strategy=strategy, accelerator="cpu", max_steps=2, logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False)
            trainer.fit(Net(), data)
            print(type(trainer.strategy).__name__, trainer.global_step)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == ["1", "CSXStrategy 2", "CSXStrategy 2"]


def test_importing_the_strategies_leaves_torch_distributed_checkpoint_unloaded() -> None:
    """csx_fsdp reads sharded checkpoints with it, imported when one is read: not a cost of every import."""
    done = _run("""
        import sys
        import lightning.pytorch as pl
        import cs_lightning
        from lightning.pytorch.strategies import StrategyRegistry
        print("csx_fsdp" in StrategyRegistry, "torch.distributed.checkpoint" in sys.modules)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]
