"""strategy="csx_fsdp" on CPU with gloo, 2 and 3 processes (uneven shards): each rank materializes only its
rows, and the gathered model equals one-process eager construction bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from conftest import REPO
from lightning.pytorch import seed_everything
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(REPO / "tests"))
from sharded_models import Language, LateHead, Net

from cs_lightning.deferred import materialize, recording

SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Callback, Trainer, seed_everything
    from torch.distributed.tensor import DTensor
    import cs_lightning
    from sharded_models import Language, tokens

    class Report(Callback):
        def on_fit_start(self, trainer, pl_module):  # right after materialization, before any step
            rng = torch.get_rng_state()
            state = pl_module.state_dict()
            full = {{k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in state.items()}}
            if trainer.global_rank == 0:
                torch.save({{"state": full, "rng": rng, "freqs": pl_module.net.freqs.clone()}}, "gathered.pt")
            self.local = {{k: list(v.to_local().shape) for k, v in state.items() if isinstance(v, DTensor)}}

        def on_fit_end(self, trainer, pl_module):
            batch = next(iter(tokens()))
            with torch.no_grad():
                loss = pl_module.loss(batch)
            report = {{
                "rank": trainer.global_rank, "world": trainer.world_size,
                "strategy": type(trainer.strategy).__name__, "accelerator": type(trainer.accelerator).__name__,
                "sampler": trainer.strategy.distributed_sampler_kwargs, "local": self.local,
                "steps": trainer.global_step, "loss": loss.item(), "loss_bits": loss.view(torch.int32).item(),
                "whole": sorted(trainer.strategy.sharded_whole), "threads": torch.get_num_threads(),
            }}
            with open(f"rank{{trainer.global_rank}}.json", "w") as file:
                json.dump(report, file)

    seed_everything(5)
    trainer = Trainer(strategy="csx_fsdp", devices={world}, accelerator="cpu", max_steps=2, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[Report()])
    trainer.fit(Language(build_in={build_in!r}), tokens())
    if {independent}:  # per-tensor generators: each tensor made whole, its rows kept
        seed_everything(5)
        model = Language()
        Trainer(strategy=cs_lightning.CSXFSDPStrategy(init_mode="independent"), devices={world}, accelerator="cpu",
                max_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False).fit(model, tokens())
        state = {{k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()}}
        if trainer.global_rank == 0:
            torch.save(state, "independent.pt")
    """
)


def _run(
    tmp_path: Path, world: int, build_in: str = "configure_model", independent: bool = False
) -> tuple[list[dict], dict, str]:
    script = tmp_path / "train_sharded.py"
    script.write_text(SCRIPT.format(tests=str(REPO / "tests"), world=world, build_in=build_in, independent=independent))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(world)]
    return ranks, torch.load(tmp_path / "gathered.pt"), run.stdout + run.stderr


def _eager() -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    seed_everything(5)
    net = Net()
    return {f"net.{k}": v for k, v in net.state_dict().items()}, torch.get_rng_state(), net.get_buffer("freqs")


@pytest.mark.parametrize("world", [2, 3])
def test_each_rank_makes_its_rows_and_the_gathered_model_is_eager(tmp_path: Path, world: int) -> None:
    ranks, gathered, output = _run(tmp_path, world, independent=world == 2)
    expected, rng, freqs = _eager()
    assert sorted(gathered["state"]) == sorted(expected)
    for name, tensor in expected.items():  # tied embedding/head, padding row, buffers: all bit for bit
        assert torch.equal(gathered["state"][name], tensor), name
    assert torch.equal(gathered["freqs"], freqs)  # a computed non-persistent buffer
    assert torch.equal(gathered["rng"], rng)  # the generator is where eager leaves it
    assert {r["strategy"] for r in ranks} == {"CSXFSDPStrategy"}
    assert {r["accelerator"] for r in ranks} == {"CSXAccelerator"}
    assert [r["sampler"] for r in ranks] == [{"num_replicas": world, "rank": k} for k in range(world)]
    for k, report in enumerate(ranks):  # Shard(0) = torch.chunk: ceil(rows / N) each, the last fewer
        for name, shape in report["local"].items():
            rows = expected[name].shape[0]
            assert shape == list(torch.chunk(torch.empty(rows), world)[k].shape) + list(expected[name].shape[1:])
    assert ranks[0]["whole"] == ["net.rotate", "net.tiny"]  # orthogonal_, and a draw under 16 elements
    assert output.count("generated whole on every rank, rows kept") == 1
    assert "net.rotate (copy_.default), net.tiny (randn.default)" in output
    assert {r["steps"] for r in ranks} == {2}
    if "OMP_NUM_THREADS" not in os.environ:  # each rank on its share of the cores, the launched ones too
        assert [r["threads"] for r in ranks] == [max(1, len(os.sched_getaffinity(0)) // world)] * world
    assert torch.isfinite(torch.tensor(ranks[0]["loss"]))
    assert len({r["loss_bits"] for r in ranks}) == 1  # the same loss, bit for bit, on every rank
    assert "Time to first loss" in output
    if world == 2:  # init_mode="independent": what one process makes in that mode
        seed_everything(5)
        module = Language()
        with recording():
            module.configure_model()
        materialize(module, mode="independent")
        independent = torch.load(tmp_path / "independent.pt")
        assert sorted(independent) == sorted(module.state_dict())
        for name, tensor in module.state_dict().items():
            assert torch.equal(independent[name], tensor), name


def test_a_model_built_in_init_is_sharded_after_the_fact_with_a_warning(tmp_path: Path) -> None:
    ranks, gathered, output = _run(tmp_path, 2, build_in="init")
    expected, _, _ = _eager()
    for name, tensor in expected.items():
        assert torch.equal(gathered["state"][name], tensor), name
    assert output.count("csx_fsdp: the model was built in __init__") == 1
    assert "configure_model()" in output
    assert {r["steps"] for r in ranks} == {2}
    assert ranks[0]["loss_bits"] == ranks[1]["loss_bits"]


def test_options_are_checked_with_the_fix() -> None:
    from cs_lightning import CSXFSDPStrategy

    with pytest.raises(ValueError, match=r"state_dict_type='both'.*'sharded', 'full'"):
        CSXFSDPStrategy(state_dict_type="both")
    with pytest.raises(ValueError, match=r"state_dict_type='shraded' is not supported; did you mean 'sharded'\? use"):
        CSXFSDPStrategy(state_dict_type="shraded")
    with pytest.raises(TypeError, match=r"block_classes: 3 is not an nn.Module class"):
        CSXFSDPStrategy(block_classes=[3])  # type: ignore[list-item]  # the wrong type is the test
    with pytest.raises(ValueError, match=r"block_classes: 'sharded_models.Nope' cannot be imported"):
        CSXFSDPStrategy(block_classes=["sharded_models.Nope"])
    from sharded_models import Block

    assert CSXFSDPStrategy(block_classes=["sharded_models.Block", nn.Linear]).block_classes == (Block, nn.Linear)
    assert CSXFSDPStrategy(block_classes="sharded_models.Block").block_classes == (Block,)  # one, not in a list
    assert CSXFSDPStrategy(block_classes=Block).block_classes == (Block,)
    with pytest.raises(TypeError, match=r"block_classes: 3 is not a module class, a dotted import path of one, or a"):
        CSXFSDPStrategy(block_classes=3)  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(ValueError, match=r"compile=True with trace_check=True .* add trace_check=False"):
        CSXFSDPStrategy(compile=True)


def test_block_classes_with_an_empty_module_part_names_the_key_and_the_fix() -> None:
    """'.Block' reads as a relative import, for which importlib says only "Empty module name"."""
    from cs_lightning import CSXFSDPStrategy

    with pytest.raises(ValueError) as raised:
        CSXFSDPStrategy(block_classes=[".Block"])
    assert str(raised.value) == (
        "block_classes: '.Block' cannot be imported ('.Block' is not a dotted import path such as "
        "'package.module.Name': its module part, before the last dot, is empty); give a module class or its dotted "
        "import path, e.g. 'my_project.model.Block'."
    )


BUILT_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Callback, Trainer, seed_everything
    from torch.distributed.tensor import DTensor
    import cs_lightning
    import sharded_models

    class Report(Callback):
        def on_fit_start(self, trainer, pl_module):  # right after materialization
            rng = torch.get_rng_state()
            state = {{k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in pl_module.state_dict().items()}}
            whole = trainer.strategy.sharded_whole
            torch.save({{"state": state, "rng": rng, "whole": whole}}, f"{{name}}{{trainer.global_rank}}.pt")

    for name, width in {nets!r}:  # the module's name in sharded_models, its input width
        seed_everything(5)
        trainer = Trainer(strategy="csx_fsdp", devices={world}, accelerator="cpu", max_steps=1, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                          callbacks=[Report()])
        trainer.fit(sharded_models.Built(getattr(sharded_models, name)), sharded_models.ones(width))
    """
)


def _built_on_ranks(tmp_path: Path, world: int, nets: tuple[tuple[str, int], ...]) -> str:
    """Run BUILT_SCRIPT: csx_fsdp on ``world`` ranks builds each (name, width) of ``nets``; its stderr."""
    script = tmp_path / "built.py"
    script.write_text(BUILT_SCRIPT.format(tests=str(REPO / "tests"), world=world, nets=nets))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stderr


def _eager_on_every_rank(tmp_path: Path, net: type[nn.Module], world: int) -> list[dict]:
    """Assert that every rank gathered eager's state dict (seed 5) and left the generator as eager did; each
    rank's report (``whole``: the parameters generated whole, rows kept)."""
    seed_everything(5)
    expected = {f"net.{k}": v for k, v in net().state_dict().items()}
    rng = torch.get_rng_state()
    reports = [torch.load(tmp_path / f"{net.__name__}{rank}.pt") for rank in range(world)]
    for rank, got in enumerate(reports):
        assert sorted(got["state"]) == sorted(expected)
        for name, tensor in expected.items():
            assert torch.equal(got["state"][name], tensor), (net.__name__, name, rank)
        assert torch.equal(got["rng"], rng), (net.__name__, rank)
    return reports


@pytest.mark.parametrize("world", [2, 3])
def test_a_constructor_reading_a_value_and_strided_parameters_are_eager(tmp_path: Path, world: int) -> None:
    from sharded_models import ReadsAValue, Strided

    stderr = _built_on_ranks(tmp_path, world, (("ReadsAValue", 16), ("Strided", 17)))
    assert "reads the value of a randomly initialized tensor" in stderr
    # the tensors made before the read; the rows of each view
    assert all(got["whole"] == {} for got in _eager_on_every_rank(tmp_path, ReadsAValue, world))
    for got in _eager_on_every_rank(tmp_path, Strided, world):  # generated whole, rows kept
        assert got["whole"] == {
            "net.transposed": "non-contiguous, strides (1, 40)",
            "net.permuted": "non-contiguous, strides (1, 35, 7)",
            "net.every_other": "non-contiguous, strides (34, 1)",
        }


TWO_RECORDINGS_SCRIPT = textwrap.dedent(
    """
    import contextlib, os, sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Callback, Trainer, seed_everything
    from torch.distributed.tensor import DTensor
    import cs_lightning
    from sharded_models import {model}, ones
    rank = int(os.environ.get("LOCAL_RANK", 0))

    class Report(Callback):
        def on_fit_start(self, trainer, pl_module):  # right after materialization
            rng = torch.get_rng_state()
            state = {{k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in pl_module.state_dict().items()}}
            torch.save({{"state": state, "rng": rng}}, f"rank{{trainer.global_rank}}.pt")

        def on_fit_end(self, trainer, pl_module):
            torch.save(trainer.global_step, f"steps{{trainer.global_rank}}.pt")

    seed_everything({seed})
    trainer = Trainer(strategy={strategy}, devices=2, accelerator="cpu", max_steps=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[Report()])
    with trainer.init_module() if {recorded} else contextlib.nullcontext():
        model = {model}()
    torch.save(torch.randn(3), f"drawn{{trainer.global_rank}}.pt")  # a DataModule's random_split, say
    trainer.fit(model, ones(16))
    torch.distributed.destroy_process_group()  # else plain ddp's gloo threads may abort the exit (SIGABRT)
    """
)


def _two_recordings(
    tmp_path: Path, strategy: str, seed: str, recorded: bool = True, model: str = "TwoRecordings"
) -> tuple[Path, str]:
    """TWO_RECORDINGS_SCRIPT in a folder of its own: the folder and the run's stderr."""
    folder = tmp_path / f"{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    script = folder / "two_recordings.py"
    script.write_text(
        TWO_RECORDINGS_SCRIPT.format(
            tests=str(REPO / "tests"), strategy=strategy, seed=seed, recorded=recorded, model=model
        )
    )
    run = subprocess.run([sys.executable, str(script)], cwd=folder, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return folder, run.stderr


def _same_runs(first: Path, second: Path, draws: bool = True) -> None:
    """Each rank's weights gathered at the start of fit and steps taken; with ``draws``, also its numbers drawn
    before fit and its generator state at the start of fit."""
    for rank in range(2):
        for name in [f"steps{rank}.pt"] + [f"drawn{rank}.pt"] * draws:
            assert torch.equal(*(torch.as_tensor(torch.load(folder / name)) for folder in (first, second))), name
        one, other = (torch.load(folder / f"rank{rank}.pt") for folder in (first, second))
        assert sorted(one["state"]) == sorted(other["state"])
        assert {"first.weight", "scale", "second.weight"} <= set(one["state"])
        for name, tensor in one["state"].items():
            assert torch.equal(other["state"][name], tensor), (name, rank)
        assert not draws or torch.equal(one["rng"], other["rng"]), rank


@pytest.mark.parametrize(("seed", "recorded"), [("5", True), ("5 + rank", True), ("5 + rank", False)])
def test_a_model_recorded_in_init_module_and_in_configure_model_is_ddps(
    tmp_path: Path, seed: str, recorded: bool
) -> None:
    """Two recordings: materializing the first asked it where the second's tensors were ("KeyError: <address>").
    The numbers drawn between ``trainer.init_module()`` and ``fit`` and the weights are those of the same script
    under Lightning's ddp, where the fit seeds the generator again (``reset_seed``) before ``configure_model``. The
    first layer's draws were replayed from where the generator was when they were recorded (it was moved past
    them as the block ended, so the draws before ``fit`` were eager's); they came from the generator as it was at
    materialize, with a warning. Ranks seeded apart make their rows from rank 0's generator, as DDP broadcasts rank
    0's weights (each made its rows of another model), also of a layer built eagerly, and each goes on from its
    own generator, past draws whose count replay cannot know (``randn(4)``)."""
    ddp, _ = _two_recordings(tmp_path, "'ddp'", seed, recorded)
    csx, stderr = _two_recordings(tmp_path, "'csx_fsdp'", seed, recorded)
    _same_runs(ddp, csx)
    said = [line for line in stderr.splitlines() if ": materialize: " in line or "differ across ranks" in line]
    if seed == "5":
        assert said == []
    elif recorded:  # both recordings: the one of trainer.init_module() and the one of configure_model
        assert len(said) == 2 and all("the ranks' generators differ" in line for line in said)
    else:
        assert len(said) == 2 and "the tensors built outside trainer.init_module()" in said[0]


def test_ranks_seeded_apart_past_a_draw_whose_count_depends_on_values_make_rank_0s_model(tmp_path: Path) -> None:
    """Each rank's generator cannot be moved past ``bernoulli(p)`` without ``p``: the ranks go on from rank 0's
    (advancing there from a scratch tensor of garbage raised, or moved the generator by a wrong count)."""
    ddp, _ = _two_recordings(tmp_path, "'ddp'", "5 + rank", model="DrawsFromValues")
    csx, stderr = _two_recordings(tmp_path, "'csx_fsdp'", "5 + rank", model="DrawsFromValues")
    _same_runs(ddp, csx, draws=False)
    assert stderr.count("the ranks' generators differ") == 2
    first = [torch.load(csx / f"rank{rank}.pt")["rng"] for rank in range(2)]
    assert torch.equal(*first)  # rank 0's continuation on both


def test_independent_init_with_ranks_seeded_apart_is_rank_0s(tmp_path: Path) -> None:
    """Its per-tensor generators are seeded from rank 0's seed: each rank made its rows from its own."""
    strategy = "cs_lightning.CSXFSDPStrategy(init_mode='independent')"
    alike, _ = _two_recordings(tmp_path, strategy, "5")
    apart, stderr = _two_recordings(tmp_path, strategy, "5 + rank")
    _same_runs(alike, apart, draws=False)  # (the draws before fit and the generators are each rank's own)
    assert stderr.count("the ranks' generators differ") == 2


def test_a_view_cut_by_one_of_three_shard_boundaries_is_made_whole_on_every_rank(tmp_path: Path) -> None:
    """The ranks whose rows the view straddles made the parameter whole, the third kept its truncated normal by
    rows and waited in an all-reduce the others never made."""
    from sharded_models import HalfScaled

    _built_on_ranks(tmp_path, 3, (("HalfScaled", 4),))
    assert all(got["whole"] == {"net.w": "mul_.Tensor"} for got in _eager_on_every_rank(tmp_path, HalfScaled, 3))


def test_a_rank_holding_no_rows_of_a_parameter_leaves_the_others_eager(tmp_path: Path) -> None:
    from sharded_models import FewRows

    _built_on_ranks(tmp_path, 3, (("FewRows", 16),))
    # every parameter made by rows, the empty ones too
    assert all(got["whole"] == {} for got in _eager_on_every_rank(tmp_path, FewRows, 3))


RESUME_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Callback, Trainer, seed_everything
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.distributed.tensor import DTensor
    from cs_lightning import CSXFSDPStrategy
    from sharded_models import {model}, tokens

    class Record(Callback):
        def __init__(self):
            self.losses, self.lrs = [], []

        def on_train_start(self, trainer, pl_module):  # a checkpoint before the first step: empty optimizer state
            if trainer.global_step == 0:
                trainer.save_checkpoint("start.ckpt")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.losses.append(outputs["loss"].detach().view(torch.int32).item())
            self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    def run(ckpt_path=None):
        seed_everything(5)
        record = Record()
        saving = ModelCheckpoint(dirpath="saved", every_n_train_steps=2, save_top_k=-1)
        trainer = Trainer(strategy=CSXFSDPStrategy(state_dict_type={kind!r}), devices={world}, accelerator="cpu",
                          max_steps=4, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          callbacks=[record, saving])
        model = {model}()
        trainer.fit(model, tokens(n=16), ckpt_path=ckpt_path)
        optimizer = trainer.optimizers[0]
        state = {{k: (v.full_tensor() if isinstance(v, DTensor) else v).detach() for k, v in model.state_dict().items()}}
        moments = [s[k].full_tensor() for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")]
        steps = [float(s["step"]) for s in optimizer.state.values()]
        return record, state, moments, steps, torch.get_rng_state()

    whole = run()
    report = {{}}
    for name, path in (("start", "start.ckpt"), ("step2", "saved/epoch=0-step=2.ckpt")):
        record, state, moments, steps, rng = run(path)
        report[name] = {{
            "losses": record.losses == whole[0].losses[-len(record.losses):], "n": len(record.losses),
            "lrs": record.lrs == whole[0].lrs[-len(record.lrs):],
            "weights": all(torch.equal(state[k], whole[1][k]) for k in whole[1]),
            "moments": len(moments) == len(whole[2]) and all(torch.equal(a, b) for a, b in zip(moments, whole[2])),
            "steps": steps == whole[3], "rng": torch.equal(rng, whole[4]),
        }}
    report["uninterrupted_steps"] = sorted(set(whole[3]))  # saving before the first step took no step
    import torch.distributed as dist
    with open(f"resume{{dist.get_rank()}}.json", "w") as file:
        json.dump(report, file)
    """
)


def _run_resume_script(tmp_path: Path, kind: str, model: str, world: int) -> Path:
    """RESUME_SCRIPT on ``world`` processes with the ``model`` of sharded_models; the checkpoint it saved at step 2."""
    script = tmp_path / "resume.py"
    script.write_text(RESUME_SCRIPT.format(tests=str(REPO / "tests"), kind=kind, world=world, model=model))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return tmp_path / "saved" / "epoch=0-step=2.ckpt"


@pytest.mark.parametrize("kind", ["sharded", "full"])
@pytest.mark.parametrize("model", ["Language", "Normed"])
def test_resume_from_a_checkpoint_is_exact(tmp_path: Path, kind: str, model: str) -> None:
    """Normed's BatchNorm statistics are each rank's (its batches differ): the checkpoint holds every rank's."""
    world = 2
    saved = _run_resume_script(tmp_path, kind, model, world)
    assert saved.is_dir() if kind == "sharded" else saved.is_file()
    if kind == "full" and model == "Language":  # a plain single-file Lightning checkpoint: it loads unsharded
        checkpoint = torch.load(saved, weights_only=False)
        module = Language()
        module.configure_model()
        module.load_state_dict(checkpoint["state_dict"])
        optimizer = module.configure_optimizers()["optimizer"]
        optimizer.load_state_dict(checkpoint["optimizer_states"][0])
        assert [float(s["step"]) for s in optimizer.state.values()] == [2.0] * len(list(module.parameters()))
    for rank in range(world):
        report = json.loads((tmp_path / f"resume{rank}.json").read_text())
        expected = {"losses": True, "lrs": True, "weights": True, "moments": True, "steps": True, "rng": True}
        assert report["step2"] == {**expected, "n": 2}
        # written in on_train_start, after the loop drew its data loader's seed, which a resumed run draws again
        assert report["start"] == {**expected, "n": 4, "rng": False}
        assert report["uninterrupted_steps"] == [4.0]


@pytest.mark.parametrize("kind", ["sharded", "full"])
def test_resume_is_exact_when_a_parameter_had_no_optimizer_state_yet(tmp_path: Path, kind: str) -> None:
    """A sharded checkpoint saved while a parameter had no AdamW state (no gradient yet) failed to load with
    'Missing key in checkpoint state_dict: optimizer_0.state.late.weight.step': the state to load into gave
    every parameter one. The parameter stays without state, as in the uninterrupted run."""
    world = 2
    saved = _run_resume_script(tmp_path, kind, "LateHead", world)
    module = LateHead()
    module.configure_model()
    names = [name for name, _ in module.named_parameters()]
    assert names[:2] == ["late.weight", "late.bias"]  # first in the optimizer: the others' state keys follow them
    if kind == "sharded":
        keys = FileSystemReader(saved).read_metadata().state_dict_metadata
        with_state = [name for name in names if f"optimizer_0.state.{name}.step" in keys]
    else:  # by position in the optimizer: it loads into the unsharded model's own
        optimizer = module.configure_optimizers()["optimizer"]
        optimizer.load_state_dict(torch.load(saved, weights_only=False)["optimizer_states"][0])
        steps = {
            name: float(optimizer.state[p]["step"]) for name, p in module.named_parameters() if p in optimizer.state
        }
        assert set(steps.values()) == {2.0}
        with_state = list(steps)
    assert with_state == names[2:]  # saved without state for late.*
    for rank in range(world):
        report = json.loads((tmp_path / f"resume{rank}.json").read_text())
        expected = {"losses": True, "lrs": True, "weights": True, "moments": True, "steps": True, "rng": True}
        assert report["step2"] == {**expected, "n": 2}
        assert report["start"] == {**expected, "n": 4, "rng": False}  # before the first step: no state at all
        assert report["uninterrupted_steps"] == [2.0, 4.0]  # late.* stepped from step 2 on


@pytest.mark.parametrize("kind", ["sharded", "full"])
def test_resume_is_exact_when_the_optimizer_orders_its_parameters_unlike_the_model(tmp_path: Path, kind: str) -> None:
    """A full checkpoint keys the optimizer state by position in model.parameters(), each group sorted; it was read
    by position in the optimizer, which put each state on another parameter ("aten.lerp_.Scalar got mixed
    torch.Tensor and DTensor" where the shapes differ, silently wrong where they agree)."""
    world = 2
    saved = _run_resume_script(tmp_path, kind, "Reversed", world)
    if kind == "full":  # both checkpoints keyed by position in the model, before the first step too
        module = Language()
        module.configure_model()
        model_order = list(range(len(list(module.parameters()))))
        for path in (saved, tmp_path / "start.ckpt"):
            groups = torch.load(path, weights_only=False)["optimizer_states"][0]["param_groups"]
            assert [group["params"] for group in groups] == [model_order]
    for rank in range(world):
        report = json.loads((tmp_path / f"resume{rank}.json").read_text())
        expected = {"losses": True, "lrs": True, "weights": True, "moments": True, "steps": True, "rng": True}
        assert report["step2"] == {**expected, "n": 2}
        assert report["start"] == {**expected, "n": 4, "rng": False}


class _TwoLayers(L.LightningModule):
    """Two layers, optimized in the param groups ``groups`` names (lists of layer names)."""

    def __init__(self, groups: list[list[str]]) -> None:
        super().__init__()
        self.groups = groups

    def configure_model(self) -> None:
        self.proj = nn.Linear(4, 6)
        self.head = nn.Linear(6, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.head(self.proj(batch[0])).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = [{"params": [p for name in names for p in getattr(self, name).parameters()]} for names in self.groups]
        return torch.optim.Adam(groups, lr=0.1)


@pytest.mark.parametrize(
    ("groups", "problem"),
    [
        ([["proj", "head"]], "its param groups hold [2, 2] parameters, the optimizer's [4]"),
        ([["head"], ["proj"]], "its param group 0 holds states of the parameters at [0, 1] in model.parameters(), which"
         " the optimizer's param group 0 does not hold"),
    ],
)  # fmt: skip
def test_resuming_a_full_checkpoint_with_other_param_groups_is_refused_naming_them(
    tmp_path: Path, groups: list[list[str]], problem: str
) -> None:
    """The groups were paired by zip, which stopped at the shorter: a bare KeyError, or states on other parameters."""
    from cs_lightning import CSXFSDPStrategy
    from cs_lightning.errors import CheckpointMismatchError

    def trainer(steps: int) -> L.Trainer:
        return L.Trainer(
            strategy=CSXFSDPStrategy(state_dict_type="full", block_classes=[]), devices=1, accelerator="cpu",
            max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False,
        )  # fmt: skip

    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    saving = trainer(1)
    saving.fit(_TwoLayers([["proj"], ["head"]]), data)
    saving.save_checkpoint(tmp_path / "two_groups.ckpt")
    with pytest.raises(CheckpointMismatchError) as raised:
        trainer(2).fit(_TwoLayers(groups), data, ckpt_path=tmp_path / "two_groups.ckpt")
    assert str(raised.value) == (
        f"The checkpoint's optimizer state does not fit the optimizer: {problem}. Resume with the param groups it was"
        " saved with (configure_optimizers), or load the model weights alone instead of ckpt_path to start a new"
        " optimizer."
    )


class _RebuiltOnEveryCall(L.LightningModule):
    def configure_model(self) -> None:  # no guard: trainer.test builds new layers over the sharded model
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("loss", self.net(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_configure_model_building_layers_again_on_a_sharded_model_is_refused_with_the_fix() -> None:
    """torch's own words were an AssertionError about "composable distributed APIs", from cs_lightning's line."""
    from cs_lightning.errors import UsageError

    trainer = L.Trainer(
        strategy="csx_fsdp", devices=1, accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer.fit(_RebuiltOnEveryCall(), data)
    with pytest.raises(
        UsageError, match=r"built new layers on a model that an earlier run .* Fix: build them only on the first"
    ):
        trainer.test(trainer.lightning_module, data)


def test_a_full_checkpoint_keys_the_optimizer_groups_by_model_position_before_the_first_step_too(
    tmp_path: Path,
) -> None:
    """Saved before the first step, the groups were keyed by position in the optimizer; after it, by position in
    model.parameters() (Lightning's re-key): the two disagreed wherever the optimizer orders them otherwise."""
    from cs_lightning import CSXFSDPStrategy

    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    keys = []
    for steps in (0, 1):
        trainer = L.Trainer(
            strategy=CSXFSDPStrategy(state_dict_type="full", block_classes=[]), devices=1, accelerator="cpu",
            max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False,
        )  # fmt: skip
        trainer.fit(_TwoLayers([["head"], ["proj"]]), data)
        trainer.save_checkpoint(tmp_path / f"{steps}.ckpt")
        saved = torch.load(tmp_path / f"{steps}.ckpt", weights_only=False)["optimizer_states"][0]
        keys.append([group["params"] for group in saved["param_groups"]])
    assert keys == [[[2, 3], [0, 1]]] * 2  # head.weight, head.bias are 2, 3 in model.parameters()


class _RenamesOnLoad(_TwoLayers):
    """A hook that renames the checkpoint's state_dict keys where there is one (a prefix of an older version)."""

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.seen = type(checkpoint.get("state_dict")).__name__
        if "state_dict" in checkpoint:
            state = checkpoint["state_dict"].items()
            checkpoint["state_dict"] = {name.removeprefix("model."): value for name, value in state}

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.training_step(batch, batch_idx)


@pytest.mark.parametrize(("kind", "seen"), [("sharded", "NoneType"), ("full", "dict")])
def test_an_on_load_checkpoint_hook_finds_a_state_dict_only_where_it_is_a_mapping(
    tmp_path: Path, kind: str, seen: str
) -> None:
    """A sharded folder's loader object stood under "state_dict": a hook reading it as a mapping failed
    ("'_ShardedFolder' object has no attribute 'items'"); as under Lightning's ModelParallelStrategy, a folder's
    checkpoint has none before its tensors are read."""
    from cs_lightning import CSXFSDPStrategy

    def trainer(steps: int) -> L.Trainer:
        return L.Trainer(
            strategy=CSXFSDPStrategy(state_dict_type=kind, block_classes=[]), devices=1, accelerator="cpu",
            max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False,
        )  # fmt: skip

    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    saving, saved = trainer(1), _RenamesOnLoad([["proj", "head"]])
    saving.fit(saved, data)
    saving.save_checkpoint(tmp_path / "saved")
    resumed = _RenamesOnLoad([["proj", "head"]])
    trainer(1).validate(resumed, data, ckpt_path=tmp_path / "saved", verbose=False)
    assert resumed.seen == seen
    for name, tensor in saved.state_dict().items():
        assert torch.equal(resumed.state_dict()[name].full_tensor(), tensor.full_tensor()), name


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    from lightning.pytorch import Trainer, seed_everything
    from cs_lightning import CSXFSDPStrategy
    from sharded_models import Measured, tokens

    def run(ckpt_path=None, save=None):
        seed_everything(5)
        trainer = Trainer(strategy=CSXFSDPStrategy(state_dict_type="full"), devices=2, accelerator="cpu",
                          max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False)
        model = Measured()
        trainer.fit(model, tokens(n=16, length=4), ckpt_path=ckpt_path)
        if save:
            trainer.save_checkpoint(save)
        return trainer.global_rank, {{"peak": model.peak, "anonymous": model.anonymous}}

    mode = sys.argv[1]  # each in a fresh process: freed memory stays in the process's heap
    rank, peak = run(save="full.ckpt") if mode == "initialized" else run(ckpt_path="full.ckpt")
    with open(f"{{mode}}{{rank}}.json", "w") as file:
        json.dump(peak, file)
    """
)


def test_each_rank_holds_about_its_share_of_the_model_during_setup(tmp_path: Path) -> None:
    from sharded_models import Wide

    model_bytes = 4 * sum(p.numel() for p in Wide().parameters())  # 80 MiB; largest tensor 16 MiB
    script = tmp_path / "memory.py"
    script.write_text(MEMORY_SCRIPT.format(tests=str(REPO / "tests")))
    for mode in ("initialized", "loaded"):
        run = subprocess.run(
            [sys.executable, str(script), mode], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr[-3000:]
    for rank in (0, 1):
        peaks = {mode: json.loads((tmp_path / f"{mode}{rank}.json").read_text()) for mode in ("initialized", "loaded")}
        # half the model, plus the rows of one tensor in flight; a whole replica would be 1.0
        assert 0.45 * model_bytes < peaks["initialized"]["peak"] <= 0.65 * model_bytes, peaks
        # from a single file: its own rows copied out of the mapping (pages unmapped as copied, but
        # the peak counts those in flight)
        assert 0.45 * model_bytes < peaks["loaded"]["anonymous"] <= 0.65 * model_bytes, peaks
        assert peaks["loaded"]["peak"] <= 0.75 * model_bytes, peaks


def test_the_trace_check_refuses_a_host_read_on_every_rank(tmp_path: Path) -> None:
    script = tmp_path / "reads.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        from lightning.pytorch import Trainer, seed_everything
        import cs_lightning
        from sharded_models import Language, tokens

        class Reads(Language):
            def training_step(self, batch, batch_idx):
                loss = self.loss(batch)
                if loss > 100:  # the host read
                    loss = loss * 0
                return loss

        seed_everything(5)
        try:
            Trainer(strategy="csx_fsdp", devices=2, accelerator="cpu", max_steps=2, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False).fit(Reads(), tokens())
        except cs_lightning.GraphBreakError as error:
            print("refused:", str(error).splitlines()[1].strip())
    """)
    )
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    line = next(k for k, text in enumerate(script.read_text().splitlines(), 1) if "if loss > 100:" in text)
    assert f'refused: File "{script}", line {line}, in training_step' in run.stdout, run.stderr[-3000:]


def test_a_training_step_calling_a_submodule_directly_trains_as_one_calling_self(tmp_path: Path) -> None:
    # Lightning users often skip forward (`self.net(x)` in training_step); FSDP2 gathers the
    # root's parameters only around forward, so this failed with "mixed torch.Tensor and DTensor"
    script = tmp_path / "direct.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        import torch
        from lightning.pytorch import Trainer, seed_everything
        from torch import nn
        import cs_lightning
        from sharded_models import Language, tokens

        class Direct(Language):
            def training_step(self, batch, batch_idx):
                inputs, targets = batch
                return nn.functional.cross_entropy(self.net(inputs).flatten(0, 1), targets.flatten())

            def validation_step(self, batch, batch_idx):
                self.log("val", self.training_step(batch, batch_idx))

        losses = []
        for model in (Language(), Direct()):
            seed_everything(5)
            trainer = Trainer(strategy="csx_fsdp", devices=2, accelerator="cpu", max_steps=2, logger=False,
                              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                              limit_val_batches=1)
            trainer.fit(model, tokens(), tokens() if isinstance(model, Direct) else None)
            with torch.no_grad():
                losses.append(model.loss(next(iter(tokens()))).view(torch.int32).item())
        with open(f"rank{{trainer.global_rank}}.json", "w") as file:
            json.dump(losses, file)
    """)
    )
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert ranks[0] == ranks[1]  # both ranks agree
    direct, through_self = ranks[0]
    assert direct == through_self  # bit for bit: the same steps


def test_compile_without_the_trace_check_trains_as_eager(tmp_path: Path) -> None:
    script = tmp_path / "compiled.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        import torch
        from lightning.pytorch import Trainer, seed_everything
        import cs_lightning
        from sharded_models import Language, tokens

        losses = []
        for options in ({{}}, {{"compile": True, "compile_backend": "eager", "trace_check": False}}):
            seed_everything(5)
            model = Language()
            trainer = Trainer(strategy=cs_lightning.CSXFSDPStrategy(**options), devices=2, accelerator="cpu",
                              max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                              enable_model_summary=False)
            trainer.fit(model, tokens())
            with torch.no_grad():
                losses.append(model.loss(next(iter(tokens()))).item())
            assert trainer.global_step == 2
        with open(f"rank{{trainer.global_rank}}.json", "w") as file:
            json.dump(losses, file)
    """)
    )
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert ranks[0] == ranks[1]
    eager, compiled = ranks[0]
    # close, not the same bits: with csx on one process too, compile=True ends in other last digits
    assert compiled == pytest.approx(eager, rel=1e-5)


def test_what_fsdp2_cannot_shard_is_refused_in_words_before_sharding() -> None:
    from cs_lightning.errors import ShardingError
    from cs_lightning.strategies.csx_fsdp import _blocks, _check_shardable

    class Scalar(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4)])
            self.scale = nn.Parameter(torch.tensor(2.0))

    scalar = Scalar()
    with pytest.raises(ShardingError, match=r"'scale' is a scalar .*fix: give it shape \(1,\)"):
        _check_shardable(scalar, _blocks(scalar, None))

    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4).double()])
            self.head = nn.Linear(4, 4)

    mixed = Mixed()
    _check_shardable(mixed, _blocks(mixed, None))  # each block in one dtype: fine
    mixed.head.double()
    mixed.blocks[1].weight.data = mixed.blocks[1].weight.data.float()
    with pytest.raises(ShardingError, match=r"block 'blocks.1' mix dtypes \(blocks.1.weight \(float32\), "):
        _check_shardable(mixed, _blocks(mixed, None))
    mixed.blocks[1].double()
    with pytest.raises(ShardingError, match=r"parameters no block holds mix dtypes .*fix: give the module"):
        _check_shardable(mixed, [])
    _check_shardable(mixed, [], torch.bfloat16)  # what a recorded model is materialized in: one dtype
    mixed.double().blocks[0].bfloat16().requires_grad_(False)  # a frozen base of another dtype (LoRA): FSDP2 takes it
    _check_shardable(mixed, [])


class _ScaledLayer(L.LightningModule):
    """A layer and a 0-dim parameter (FSDP2 cannot shard it), built in ``configure_model``; the weights at the
    start of fit in ``initial``."""

    def configure_model(self) -> None:
        if not hasattr(self, "layer"):
            self.layer = nn.Linear(2, 3)
            self.scale = nn.Parameter(torch.tensor(2.0))

    def on_fit_start(self) -> None:
        self.initial = {name: value.detach().clone() for name, value in self.state_dict().items()}

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return (self.layer(batch[0]) * self.scale).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_sync_batchnorm_is_refused_with_the_fix_before_anything_runs() -> None:
    """ModelParallelStrategy ignores the flag: the statistics stayed each rank's, as without it."""
    from cs_lightning.errors import UsageError

    run = L.Trainer(strategy="csx_fsdp", devices=1, accelerator="cpu", sync_batchnorm=True, max_steps=1, logger=False)
    model = _ScaledLayer()
    with pytest.raises(UsageError, match=r"^sync_batchnorm=True: csx_fsdp does not synchronize BatchNorm statistics"):
        run.fit(model, DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2))
    assert run.global_step == 0 and not hasattr(model, "layer")  # configure_model did not run


@pytest.mark.parametrize("name", ["StochasticWeightAveraging", "EMAWeightAveraging"])
def test_weight_averaging_is_refused_with_the_fix_before_anything_runs(name: str) -> None:
    """Lightning's SWA refuses its own FSDP; under ModelParallelStrategy these fail a step or an epoch in, mixing
    their copy's plain tensors with the DTensors (or, the model built in configure_model, average nothing)."""
    from lightning.pytorch import callbacks

    from cs_lightning.errors import UsageError

    averaging = getattr(callbacks, name)(**({"swa_lrs": 0.01} if name == "StochasticWeightAveraging" else {}))
    run = L.Trainer(strategy="csx_fsdp", devices=1, accelerator="cpu", callbacks=[averaging], max_steps=1, logger=False)
    model = _ScaledLayer()
    with pytest.raises(UsageError, match=rf"^{name} does not support sharded models: .*'csx_ddp'"):
        run.fit(model, DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2))
    assert run.global_step == 0 and not hasattr(model, "layer")  # configure_model did not run


def test_a_model_csx_fsdp_refuses_stays_recorded_and_trains_under_csx() -> None:
    """Refused after its tensors were swapped for meta ones, it was neither recorded nor real any more."""
    from cs_lightning.deferred import is_deferred
    from cs_lightning.errors import ShardingError

    def trainer(strategy: str) -> L.Trainer:
        return L.Trainer(
            strategy=strategy, devices=1, accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
        )  # fmt: skip

    data = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
    seed_everything(3)
    model = _ScaledLayer()
    with pytest.raises(ShardingError, match=r"parameter 'scale' is a scalar \(0-dim\)"):
        trainer("csx_fsdp").fit(model, data)
    assert is_deferred(model)
    csx = trainer("csx")
    csx.fit(model, data)
    assert csx.global_step == 1
    seed_everything(3)
    eager = _ScaledLayer()
    eager.configure_model()
    assert sorted(model.initial) == ["layer.bias", "layer.weight", "scale"]
    for name, tensor in eager.state_dict().items():
        assert torch.equal(model.initial[name], tensor), name


def test_resuming_from_a_weights_only_sharded_checkpoint_says_it_holds_no_optimizer(tmp_path: Path) -> None:
    """It said 'learning rate scheduler state' (the folder always claimed optimizer states), whatever the model."""
    script = tmp_path / "weights_only.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        from lightning.pytorch import Trainer, seed_everything
        import cs_lightning
        from sharded_models import Language, tokens

        def trainer():
            return Trainer(strategy="csx_fsdp", devices=2, accelerator="cpu", max_steps=2, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)

        seed_everything(5)
        first = trainer()
        first.fit(Language(), tokens())
        first.save_checkpoint("weights", weights_only=True)
        try:
            trainer().fit(Language(), tokens(), ckpt_path="weights")
        except KeyError as error:
            print(f"rank {{first.global_rank}}: {{error}}")
    """)
    )
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Trying to restore optimizer state but checkpoint contains only the model" in run.stdout, run.stdout


OTHER_MODEL_SCRIPT = textwrap.dedent(
    """
    import torch
    from lightning.pytorch import LightningModule, Trainer, seed_everything
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from cs_lightning.errors import CheckpointMismatchError

    class Tiny(LightningModule):
        def __init__(self, width=6, more=False, strict=True):
            super().__init__()
            self.width, self.more, self.strict_loading = width, more, strict

        def configure_model(self):
            self.proj = nn.Linear(4, self.width)
            self.head = nn.Linear(self.width, 1) if self.more else None

        def forward(self, x):
            y = self.proj(x)
            return (self.head(y) if self.more else y).sum()

        def training_step(self, batch, batch_idx):
            return self(batch[0])

        validation_step = training_step

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer():
        return Trainer(strategy="csx_fsdp", devices=1, accelerator="cpu", max_steps=1, logger=False,
                       enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)

    data = DataLoader(TensorDataset(torch.ones(4, 4)), batch_size=2)
    seed_everything(0)
    saving, saved = trainer(), Tiny()
    saving.fit(saved, data)
    saving.save_checkpoint("tiny")
    for model in (Tiny(width=8), Tiny(more=True)):
        try:
            trainer().fit(model, data, ckpt_path="tiny")
        except CheckpointMismatchError as error:
            print(error)
    lenient = Tiny(more=True, strict=False)  # loads what the folder holds, initializes the rest
    trainer().validate(lenient, data, ckpt_path="tiny", verbose=False)
    print("lenient", torch.equal(lenient.proj.weight.full_tensor(), saved.proj.weight.full_tensor()))
    """
)


def test_resuming_from_a_sharded_checkpoint_of_another_model_is_refused_naming_what_differs(tmp_path: Path) -> None:
    """torch.distributed.checkpoint failed deep in its load plan, in a long traceback; now the folder's index
    is compared with the model first, as a single-file checkpoint is (one process: the check reads no shard)."""
    script = tmp_path / "other_model.py"
    script.write_text(OTHER_MODEL_SCRIPT)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "tiny").is_dir()  # written with state_dict_type="sharded", csx_fsdp's default
    assert run.stdout.splitlines() == [
        "Error(s) in loading state_dict for Tiny: size mismatch for proj.weight (checkpoint (6, 4), model (8, 4)),"
        " proj.bias (checkpoint (6,), model (8,)). Load a checkpoint of this model.",
        "Error(s) in loading state_dict for Tiny: missing keys head.bias, head.weight. Load a checkpoint of this"
        " model, or set `strict_loading = False` on the LightningModule to initialize the missing ones.",
        "lenient True",
    ]


class _NoLayerList(L.LightningModule):
    """Layers in an nn.Sequential, no nn.ModuleList: nothing csx_fsdp finds to shard block by block."""

    def configure_model(self) -> None:
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("block_classes", "found"),
    [
        (None, "_NoLayerList has no nn.ModuleList of layers with parameters"),
        ([nn.Conv2d], "no module of _NoLayerList is one of block_classes (Conv2d)"),
        ([], None),  # the root alone, as asked
    ],
)
def test_a_model_with_no_blocks_is_one_group_and_the_warning_says_how_to_split_it(block_classes, found) -> None:
    from cs_lightning import CSXFSDPStrategy

    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = L.Trainer(
        strategy=CSXFSDPStrategy(block_classes=block_classes), devices=1, accelerator="cpu", max_steps=1,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(_NoLayerList(), data)
    said = [str(w.message) for w in caught if "one sharded group" in str(w.message)]
    assert said == ([] if found is None else [
        f"csx_fsdp: {found}, so the whole model is one sharded group: each step gathers all of its weights at once "
        "on every rank; name the classes of its repeated layers in CSXFSDPStrategy(block_classes=[...]) to gather "
        "them one at a time."
    ])  # fmt: skip
    assert trainer.global_step == 1
