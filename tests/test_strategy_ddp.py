"""devices=2 on CPU: two processes, two systems, replicas identical without a weight broadcast."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from conftest import REPO

SCRIPT = textwrap.dedent(
    """
    import hashlib, json, os, sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Callback, seed_everything
    from lightning_models import Regressor, fit

    class Report(Callback):
        def on_fit_start(self, trainer, pl_module):  # after DDP wrapped the model
            self.at_start = _digest(pl_module)

        def on_fit_end(self, trainer, pl_module):
            report = {{
                "rank": trainer.global_rank, "world": trainer.world_size, "pid": os.getpid(),
                "strategy": type(trainer.strategy).__name__, "accelerator": type(trainer.accelerator).__name__,
                "broadcast": trainer.strategy.weights_broadcast, "at_start": self.at_start,
                "at_end": _digest(pl_module), "steps": trainer.global_step,
            }}
            with open(f"rank{{trainer.global_rank}}.json", "w") as file:
                json.dump(report, file)

    def _digest(module):
        digest = hashlib.sha256()
        for tensor in module.state_dict().values():
            digest.update(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    seed_everything(3)
    fit(Regressor(build_in="configure_model"), "csx", steps=4, devices=2, accelerator="cpu", callbacks=[Report()])
    """
)


def test_two_cpu_systems_train_data_parallel_with_identical_replicas(tmp_path: Path) -> None:
    script = tmp_path / "train_two_systems.py"
    script.write_text(SCRIPT.format(tests=str(REPO / "tests")))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world"] for r in ranks} == {2}
    assert ranks[0]["pid"] != ranks[1]["pid"]
    assert {r["strategy"] for r in ranks} == {"CSXDDPStrategy"}
    assert {r["accelerator"] for r in ranks} == {"CSXAccelerator"}
    assert [r["broadcast"] for r in ranks] == [False, False]  # replicas agreed: DDP did not sync weights
    assert ranks[0]["at_start"] == ranks[1]["at_start"]
    assert ranks[0]["at_end"] == ranks[1]["at_end"] != ranks[0]["at_start"]  # trained, in lockstep
    assert {r["steps"] for r in ranks} == {4}


RESUME_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Callback, seed_everything
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning_models import Regressor, fit

    mode = sys.argv[1]

    class Diverge(Callback):  # each rank draws its own count: their generators differ from step 1
        def on_train_batch_end(self, trainer, *args):
            torch.rand(trainer.global_rank + 1)

        def on_train_end(self, trainer, pl_module):
            torch.save(torch.get_rng_state(), f"{{mode}}{{trainer.global_rank}}.pt")

    seed_everything(3)
    saver = ModelCheckpoint(dirpath="ckpt", every_n_train_steps=4, save_top_k=-1)  # 4 steps: an epoch a rank
    fit(Regressor(build_in="configure_model"), "csx", steps=8, devices=2, accelerator="cpu",
        enable_checkpointing=True, callbacks=[Diverge(), saver],
        ckpt_path="ckpt/epoch=0-step=4.ckpt" if mode == "resumed" else None)
    """
)


def test_each_rank_resumes_its_own_generators(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(RESUME_SCRIPT.format(tests=str(REPO / "tests")))
    for mode in ("uninterrupted", "resumed"):
        run = subprocess.run(
            [sys.executable, str(script), mode], cwd=tmp_path, capture_output=True, text=True, timeout=240
        )
        assert run.returncode == 0, run.stderr[-3000:]
    states = {
        name: torch.load(tmp_path / f"{name}.pt")
        for name in ("uninterrupted0", "uninterrupted1", "resumed0", "resumed1")
    }
    assert not torch.equal(states["uninterrupted0"], states["uninterrupted1"])
    assert torch.equal(states["resumed0"], states["uninterrupted0"])
    assert torch.equal(states["resumed1"], states["uninterrupted1"])


DIFFERENT_SEEDS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    import cs_lightning
    from lightning.pytorch import Callback
    from lightning_models import Regressor, fit

    class SeededPerRank(Regressor):
        def configure_model(self):
            torch.manual_seed(self.global_rank)  # each rank its own weights
            super().configure_model()

    class SwappedOnRank1(Regressor):  # built in __init__ from one seed: the same weights on every rank
        def setup(self, stage):  # then on rank 1 two weights trade places: the same values, elsewhere
            if self.global_rank == 1:
                with torch.no_grad():
                    first = self.net[0].weight
                    first[0, [0, 1]] = first[0, [1, 0]]

    class Report(Callback):
        def on_train_start(self, trainer, pl_module):
            weights = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
            gathered = [torch.empty_like(weights) for _ in range(2)]
            torch.distributed.all_gather(gathered, weights)
            with open(f"rank{{trainer.global_rank}}.json", "w") as file:
                json.dump({{"broadcast": trainer.strategy.weights_broadcast,
                           "equal": torch.equal(*gathered)}}, file)

    torch.manual_seed(0)
    fit({model}, cs_lightning.CSXDDPStrategy({options}), steps=1, devices=2, accelerator="cpu", callbacks=[Report()])
    """
)


def test_replicas_that_differ_are_broadcast_unless_init_sync_is_false_and_the_warning_says_which(
    tmp_path: Path,
) -> None:
    """With init_sync=False weights_broadcast said True and the warning 'broadcasting', while none was made."""
    seen = {}
    for options in ("", "init_sync=False"):
        script = tmp_path / "seeds.py"
        model = 'SeededPerRank(build_in="configure_model")'
        script.write_text(DIFFERENT_SEEDS_SCRIPT.format(tests=str(REPO / "tests"), model=model, options=options))
        run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-3000:]
        ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
        assert ranks[0] == ranks[1]
        seen[options] = ranks[0], run.stderr
    (broadcast, warned), (kept_apart, warned_apart) = seen[""], seen["init_sync=False"]
    assert broadcast == {"broadcast": True, "equal": True} and "broadcasting rank 0's weights" in warned
    assert kept_apart == {"broadcast": False, "equal": False}
    assert "init_sync=False keeps them apart" in warned_apart and "broadcasting" not in warned_apart


def test_replicas_holding_the_same_weights_in_other_places_are_broadcast(tmp_path: Path) -> None:
    """Rank 1 with two weights of rank 0's model swapped: a checksum blind to positions took them for identical,
    skipped the broadcast, and the replicas trained apart."""
    script = tmp_path / "swapped.py"
    script.write_text(DIFFERENT_SEEDS_SCRIPT.format(tests=str(REPO / "tests"), model="SwappedOnRank1()", options=""))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks == [{"broadcast": True, "equal": True}] * 2
    assert "The model replicas differ across ranks" in run.stderr and "broadcasting rank 0's weights" in run.stderr
