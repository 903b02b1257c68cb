"""Seeding and drawing around a recorded model under Lightning: the weights and the global generator
are those of the default strategy (eager construction), and what cannot be kept deferred says where."""

from __future__ import annotations

import warnings

import pytest
import torch
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer, seed_everything
from lightning_models import data, trainer
from torch import nn
from torch.utils.data import DataLoader, random_split

from cs_lightning.deferred import materialize
from cs_lightning.errors import DeferredInitWarning


class _SeedsInConfigureModel(LightningModule):
    """Seeds in ``configure_model``: first (nothing built yet) or between its two layers."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.net: nn.Module | None = None

    def configure_model(self) -> None:
        if self.net is not None:
            return
        if self.where == "first":
            seed_everything(1234, verbose=False)
        first = nn.Linear(6, 16)
        if self.where == "between":
            seed_everything(1234, verbose=False)  # SEED_BETWEEN_LINE
        self.net = nn.Sequential(first, nn.GELU(), nn.Linear(16, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _AtFitStart(Callback):
    """The weights and the global generator once the model is built (materialized, under csx)."""

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        tensors = pl_module.state_dict().values()  # csx_fsdp's are DTensors: gathered whole
        self.weights = [getattr(t, "full_tensor", t.detach)().detach().clone() for t in tensors]
        self.rng = torch.get_rng_state()


# Each csx strategy is compared with a Lightning strategy that builds eagerly what it records; the
# distributed ones with DDP: a second in-process distributed run draws differently from a first one
# (Lightning's set-up, with or without csx), so "auto" is no twin for them within one test session.
EAGER_TWIN = {"csx": "auto", "csx_ddp": "ddp", "csx_fsdp": "ddp"}


def _built(model: LightningModule, strategy: str) -> _AtFitStart:
    torch.manual_seed(0)  # not the seed configure_model sets
    seen = _AtFitStart()
    trainer(strategy, max_steps=0, accelerator="cpu", devices=1, callbacks=[seen]).fit(model, data())
    return seen


def _assert_same(a: _AtFitStart, b: _AtFitStart) -> None:
    assert len(a.weights) == len(b.weights) == 4
    assert all(torch.equal(x, y) for x, y in zip(a.weights, b.weights))
    assert torch.equal(a.rng, b.rng)


def _line_of(marker: str) -> int:
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if marker in line and "_line_of" not in line)


@pytest.mark.parametrize("strategy", ["csx", "csx_ddp", "csx_fsdp"])
def test_seeding_at_the_top_of_configure_model_is_honoured(strategy: str) -> None:
    """It was refused: the recording thought the seed came after draws it had deferred."""
    eager = _built(_SeedsInConfigureModel("first"), EAGER_TWIN[strategy])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)  # nothing is run eagerly
        csx = _built(_SeedsInConfigureModel("first"), strategy)
    _assert_same(eager, csx)
    seed_everything(1234, verbose=False)
    plain = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 1))
    assert all(torch.equal(x, y) for x, y in zip(csx.weights, plain.state_dict().values()))


@pytest.mark.parametrize("strategy", ["csx", "csx_fsdp"])
def test_seeding_between_layers_builds_what_was_recorded_before_eagerly_and_names_the_users_line(
    strategy: str,
) -> None:
    """It stopped training, naming Lightning's seed.py and a fix for deferred_init users."""
    eager = _built(_SeedsInConfigureModel("between"), EAGER_TWIN[strategy])
    with pytest.warns(DeferredInitWarning) as caught:
        csx = _built(_SeedsInConfigureModel("between"), strategy)
    _assert_same(eager, csx)
    [warning] = [w for w in caught if issubclass(w.category, DeferredInitWarning)]
    message = str(warning.message)
    site = f"{__file__}:{_line_of('SEED_BETWEEN_LINE')}"
    assert (
        f"torch.manual_seed after random numbers were recorded in _SeedsInConfigureModel.configure_model ({site})"
        in message
    )
    assert "seed before trainer.fit" in message and "top of configure_model" in message
    assert (warning.filename, warning.lineno) == (__file__, _line_of("SEED_BETWEEN_LINE"))


class _Split(LightningDataModule):
    """Splits its data with the global generator in ``setup``, as ``random_split`` users do."""

    def setup(self, stage: str) -> None:
        self.train, self.val = random_split(data(n=20).dataset, [0.8, 0.2])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=4)


class _Net(LightningModule):
    def __init__(self, init: str = "default") -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 1))
        if init == "trunc_normal":  # bounds at 100 std: one round of normal_, whose count is known
            nn.init.trunc_normal_(self.net[0].weight, std=0.02)
        if init == "trunc_normal_wide":  # bounds at 2 std: rejection sampling, a count known only by drawing
            nn.init.trunc_normal_(self.net[0].weight, std=1.0)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _orthogonal(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.orthogonal_(module.weight)


def _init_module_then_draws(strategy: str, init: str = "default", apply_init: str = "", draws: bool = True) -> tuple:
    """``trainer.init_module()``, then (with ``draws``) draws from the global generator before and during ``fit``."""
    torch.manual_seed(0)
    seen = _AtFitStart()
    run = trainer(strategy, max_steps=0, accelerator="cpu", devices=1, callbacks=[seen])
    with run.init_module():  # INIT_MODULE_LINE
        model = _Net(init)
    if apply_init == "orthogonal":  # model.apply(init_fn) after the block: a QR of a normal draw per weight
        model.apply(_orthogonal)
    elif apply_init:  # in-place init of this parameter after the block: eager draws it next
        nn.init.normal_(getattr(model.net[2], apply_init), std=0.5)
    if not draws:
        run.fit(model, data())
        return seen, None, None
    drawn = torch.randn(3)
    split = _Split()
    run.fit(model, datamodule=split)
    return seen, drawn, list(split.val.indices)


@pytest.mark.parametrize(
    ("strategy", "init", "apply_init"),
    [
        ("csx", "default", ""),
        ("csx_ddp", "default", ""),
        ("csx", "default", "weight"),
        ("csx", "trunc_normal", ""),
        ("csx", "default", "orthogonal"),  # was refused: orthogonal_ computes in new tensors
    ],
)
def test_draws_after_init_module_are_eagers_and_so_are_the_weights(strategy: str, init: str, apply_init: str) -> None:
    """They drew what the recorded construction had not drawn yet: the user's numbers and then the
    weights (materialized from the moved generator) both differed from the default strategy's."""
    eager, eager_drawn, eager_split = _init_module_then_draws(EAGER_TWIN[strategy], init, apply_init)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        # Lightning's "init_module cannot fully support" warning (a strategy overriding model_sharded_context)
        warnings.filterwarnings("error", message=".*cannot fully support proper instantiation")
        csx, drawn, split = _init_module_then_draws(strategy, init, apply_init)
    assert torch.equal(drawn, eager_drawn) and split == eager_split
    _assert_same(eager, csx)


def test_a_trunc_normal_taking_a_second_round_after_the_jump_is_reported() -> None:
    """The jump counts a trunc_normal_ with bounds at 100 std as one round of normal_; a second
    round (odds far under 1e-3, so simulated here by moving the jump's end) is reported."""
    torch.manual_seed(0)
    run = trainer("csx", max_steps=0, accelerator="cpu", devices=1)
    with run.init_module():
        model = _Net("trunc_normal")
    recorded = model.net[0].weight._cs_recording
    assert recorded.jumped_to is not None  # the generator was moved past the block's draws
    recorded.jumped_to = torch.Generator().manual_seed(1).get_state()  # where a second round would not end
    with pytest.warns(DeferredInitWarning, match="trunc_normal_ recorded at .* took a second round"):
        run.fit(model, data())


def test_a_block_materialized_in_two_calls_after_a_jump_warns_nothing() -> None:
    """The second call replays nothing; it once compared that nothing with the jump and warned of a
    trunc_normal_ taking a second round (with no trunc_normal_ in the model)."""
    torch.manual_seed(0)
    eager = (nn.Linear(4, 4), nn.Linear(4, 4))
    torch.manual_seed(0)
    run = trainer("csx", max_steps=0, accelerator="cpu", devices=1)
    with run.init_module():
        first, second = nn.Linear(4, 4), nn.Linear(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        materialize(first)
        materialize(second)
    for want, got in zip(eager, (first, second)):
        assert torch.equal(want.weight, got.weight) and torch.equal(want.bias, got.bias)


def test_draws_after_init_module_that_cannot_be_jumped_are_reported_at_the_users_line() -> None:
    """The warning named cs_lightning's system.py and no fix."""
    _, eager_drawn, _ = _init_module_then_draws("auto", init="trunc_normal_wide")
    with pytest.warns(DeferredInitWarning, match="between recording and materialize") as caught:
        _, drawn, _ = _init_module_then_draws("csx", init="trunc_normal_wide")
    assert not torch.equal(drawn, eager_drawn)  # as before: its construction had drawn nothing yet
    [warning] = [w for w in caught if issubclass(w.category, DeferredInitWarning)]
    assert f"(recorded at {__file__}:{_line_of('INIT_MODULE_LINE')})" in str(warning.message)
    assert "build the model in configure_model" in str(warning.message)
    assert "your own torch.Generator" in str(warning.message)
    assert warning.filename == __file__


def test_an_init_after_init_module_whose_draws_cannot_be_counted_puts_the_generator_back() -> None:
    """The generator had jumped past the block's draws; a normal_ of under 16 numbers drawn next (torch
    may keep a spare sample in the generator) cannot be jumped over, so the generator goes back and
    materialize draws everything in order, as without a jump: exact."""
    eager, _, _ = _init_module_then_draws("auto", apply_init="bias", draws=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        csx, _, _ = _init_module_then_draws("csx", apply_init="bias", draws=False)
    _assert_same(eager, csx)


class _OwnGeneratorSeededAgain(_Net):
    """Initializes from a generator of its own, seeding it again between layers: eager's second layer
    repeats the first's numbers."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        nn.init.normal_(self.net[0].weight, generator=generator.manual_seed(7))
        nn.init.normal_(self.net[2].weight, generator=generator.manual_seed(7))


def _built_under_init_module(strategy: str) -> tuple[_AtFitStart, torch.Tensor]:
    generator = torch.Generator()
    torch.manual_seed(0)
    seen = _AtFitStart()
    run = trainer(strategy, max_steps=0, accelerator="cpu", devices=1, callbacks=[seen])
    with run.init_module():
        model = _OwnGeneratorSeededAgain(generator)
    run.fit(model, data())
    return seen, generator.get_state()


def test_a_generator_of_the_users_own_seeded_again_under_init_module_gives_eagers_weights() -> None:
    """Recording left the generator unmoved, so the second seed (the generator's state already) went
    unseen and the replay drew the second layer after the first: other weights than eager's."""
    eager, eager_generator = _built_under_init_module("auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        csx, csx_generator = _built_under_init_module("csx")
    _assert_same(eager, csx)
    assert torch.equal(csx_generator, eager_generator)
    assert torch.equal(csx.weights[2].flatten(), csx.weights[0].flatten()[:16])  # the second seed's numbers


class _DrawsWhenEvaluating(LightningModule):
    """Dropout kept on in validation, test and predict (Monte Carlo dropout): what each step draws is kept."""

    def __init__(self, build_in: str) -> None:
        super().__init__()
        self.net: nn.Module | None = self._layers() if build_in == "init" else None
        self.drawn: list[torch.Tensor] = []

    @staticmethod
    def _layers() -> nn.Module:
        return nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5), nn.Linear(16, 1))

    def configure_model(self) -> None:
        if self.net is None:
            self.net = self._layers()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def _sample(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        self.net.train()  # Lightning evaluates in eval mode: dropout on again
        drawn = self.net(batch[0]).detach()
        self.drawn.append(drawn)
        return drawn

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._sample(batch)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._sample(batch)

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._sample(batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _evaluated(strategy: str, build_in: str, stage: str, ckpt_path: str) -> tuple[torch.Tensor, int, torch.Tensor]:
    """What ``stage`` (validate, test or predict) of a model seeded 123 draws from ``ckpt_path``, the generator's
    seed and its state afterwards."""
    seed_everything(123, verbose=False)
    module = _DrawsWhenEvaluating(build_in)
    getattr(trainer(strategy, accelerator="cpu", devices=1), stage)(module, data(), ckpt_path=ckpt_path)
    return torch.cat(module.drawn), torch.initial_seed(), torch.get_rng_state()


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
@pytest.mark.parametrize(
    ("strategy", "build_in"),
    [("csx", "init"), ("csx", "configure_model"), ("csx_ddp", "configure_model"), ("csx_fsdp", "configure_model")],
)
def test_evaluating_a_csx_checkpoint_draws_from_the_users_seed(strategy: str, build_in: str, stage: str) -> None:
    """The generators a csx checkpoint saved were restored by validate, test and predict too: the draws were the
    training run's, not the seed's, and torch.initial_seed() read 0. Only a resumed fit restores them now, as
    Lightning restores a training state only then; evaluating, a recorded model moves the generator as eager."""
    seed_everything(0, verbose=False)
    run = trainer("csx", max_steps=3)
    run.fit(_DrawsWhenEvaluating(build_in), data())
    run.save_checkpoint("trained.ckpt")
    assert "csx_rng_states" in torch.load("trained.ckpt", weights_only=False)
    drawn, seed, rng = _evaluated(strategy, build_in, stage, "trained.ckpt")
    eager_drawn, eager_seed, eager_rng = _evaluated(EAGER_TWIN[strategy], build_in, stage, "trained.ckpt")
    assert drawn.shape == eager_drawn.shape == (64, 1)
    assert torch.equal(drawn, eager_drawn)
    assert seed == eager_seed == 123
    assert torch.equal(rng, eager_rng)


def test_a_weights_only_checkpoint_holds_no_generators(tmp_path) -> None:
    """A fit cannot resume from it (Lightning refuses one without optimizer states): nothing would read them."""
    run = trainer("csx", max_steps=2)
    run.fit(_DrawsWhenEvaluating("configure_model"), data())
    run.save_checkpoint(tmp_path / "weights.ckpt", weights_only=True)
    run.save_checkpoint(tmp_path / "full.ckpt")
    assert "csx_rng_states" not in torch.load(tmp_path / "weights.ckpt", weights_only=False)
    assert "csx_rng_states" in torch.load(tmp_path / "full.ckpt", weights_only=False)
