"""ResumableDataLoader: a DataLoader that resumes mid-epoch at the exact batch.

Lightning saves the ``state_dict()`` of a training dataloader that has one in every
checkpoint and hands it back to ``load_state_dict()`` before the resumed run iterates, with
any strategy. A plain DataLoader has none, so a run resumed from a checkpoint taken inside
an epoch starts that epoch's data over (Lightning warns once) and its weights then differ
from the uninterrupted run's. This loader's state is what makes the order and the position
reproducible: the state of its own generator at the start of the epoch (the shuffle order
and the workers' seeds are drawn from it, never from the global generator) and how many
batches it has served since.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from cs_lightning.errors import UsageError, UsageTypeError
from cs_lightning.generators import restore_rng_states, rng_states

__all__ = ["ResumableDataLoader"]

# The generators loaders made and gave to samplers: a loader re-made around such a sampler takes it over.
_LOADER_GENERATORS: weakref.WeakSet[torch.Generator] = weakref.WeakSet()


class ResumableDataLoader(DataLoader):
    """A map-style DataLoader whose position in the epoch survives a checkpoint.

    Takes DataLoader's arguments. Without a ``generator``, one is seeded from a draw of the
    global generator when first iterated (so ``seed_everything`` fixes the order; like
    DataLoader's own shuffling, building the loader draws nothing); the loader draws every
    random number of its shuffling and worker seeding from it. A torch sampler given without a
    generator of its own (``sampler=RandomSampler(ds)``, ``WeightedRandomSampler``) is given the
    loader's; one with its own generator has that generator's state saved too. A sampler of your
    own must draw from a ``generator`` attribute (or be deterministic) to resume exactly.
    Resuming skips the batches already served by loading and dropping them (once, at the resume),
    then sets the global generators back as they were before, so that a dataset drawing from
    them in this process (a random transform with ``num_workers=0``) draws what it drew before.
    """

    def __init__(self, dataset: Dataset, *args: Any, **kwargs: Any) -> None:
        if isinstance(dataset, IterableDataset):
            raise UsageTypeError(
                f"ResumableDataLoader: got dataset={type(dataset).__name__}, an IterableDataset, whose position "
                "only the dataset knows; give the dataset state_dict/load_state_dict (or use torchdata's "
                "StatefulDataLoader), or use a map-style dataset"
            )
        given = kwargs.get("generator")
        # one a loader made (Lightning re-making this loader passes it on) is seeded from the global one too
        self._seeded = given is not None and given not in _LOADER_GENERATORS
        if not self._seeded:
            kwargs["generator"] = torch.Generator()  # seeded by `_seed`
        super().__init__(dataset, *args, **kwargs)
        self._samplers = self._sampler_generators()
        self._epoch_start = self.generator.get_state()  # the generator when this epoch's order was drawn
        self._samplers_start = [g.get_state() for g in self._samplers]  # and the samplers' own ones
        self._served = 0  # batches handed out in this epoch
        self._skip = 0  # batches the next epoch starts after (set by load_state_dict)

    def _sampler_generators(self) -> list[torch.Generator]:
        """The generators of the given samplers that are not the loader's, which their state follows too.

        A torch sampler given without one (``RandomSampler(ds)``, ``WeightedRandomSampler(w, n)``)
        would draw its order from the global generator at each ``iter()``, which a resume cannot
        replay: it is given the loader's, which the state holds.
        """
        own: list[torch.Generator] = []
        for sampler in _samplers_in(self.sampler, self.batch_sampler):
            generator = getattr(sampler, "generator", False)  # False: a sampler without one (deterministic)
            if generator is None or generator in _LOADER_GENERATORS:
                # (a loader's: Lightning re-made this loader around the sampler, e.g. for DDP)
                sampler.generator = self.generator
            elif isinstance(generator, torch.Generator) and not any(generator is g for g in (self.generator, *own)):
                own.append(generator)
        _LOADER_GENERATORS.add(self.generator)
        return own

    def _seed(self) -> None:
        """Seed the generator from the global one, once, when first needed. Not when built: a loader
        made in ``train_dataloader()`` of a resumed run would put the global stream (dropout) one
        draw ahead of the uninterrupted run's, whose draw came before the checkpoint."""
        if not self._seeded:
            self.generator.manual_seed(int(torch.randint(0, 2**62, (), dtype=torch.int64)))
            self._seeded = True

    def __iter__(self) -> Any:
        self._seed()
        if self._skip:  # resumed inside an epoch: that epoch's order again, after the served batches
            self.generator.set_state(self._epoch_start)
            for generator, state in zip(self._samplers, self._samplers_start):
                generator.set_state(state)
        else:
            self._epoch_start = self.generator.get_state()
            self._samplers_start = [g.get_state() for g in self._samplers]
        skip, self._skip, self._served = self._skip, 0, 0
        return self._counted(super().__iter__(), skip)

    def _counted(self, batches: Any, skip: int) -> Any:
        if skip:
            _drop(batches, skip)
        self._served = skip
        for batch in batches:
            self._served += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The generators' states now and at the epoch's start, and the batches served since."""
        self._seed()  # a state saved before the first epoch must hold the seed that epoch will use
        state = {"generator": self.generator.get_state(), "epoch_start": self._epoch_start, "served": self._served}
        if self._samplers:
            state["samplers"] = [g.get_state() for g in self._samplers]
            state["samplers_start"] = list(self._samplers_start)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The next ``iter()`` goes on where ``state_dict`` was taken (the next epoch, at an epoch's end)."""
        keys = {"generator", "epoch_start", "served"} | ({"samplers", "samplers_start"} if self._samplers else set())
        if set(state_dict) == keys - {"samplers", "samplers_start"} and self._samplers:
            warnings.warn(
                "ResumableDataLoader.load_state_dict: the state holds no generator of the sampler (saved by"
                " cs_lightning 0.1.0?), so the sampler's order is not restored: the resumed epoch may differ",
                stacklevel=2,
            )
        elif set(state_dict) != keys:
            raise UsageError(
                f"ResumableDataLoader.load_state_dict: got keys {sorted(state_dict)}, expected {sorted(keys)}"
                " (a state of another dataloader, or of one built with other samplers?)"
            )
        served = int(state_dict["served"])
        self._seeded = True
        self.generator.set_state(state_dict["generator"])
        self._epoch_start = state_dict["epoch_start"]
        for generator, state in zip(self._samplers, state_dict.get("samplers", [])):
            generator.set_state(state)
        self._samplers_start = list(state_dict.get("samplers_start", self._samplers_start))
        self._skip = served if 0 < served < len(self) else 0


def _drop(batches: Any, count: int) -> None:
    """Load and drop ``count`` batches, leaving the global generators as they were: a dataset drawing from them in
    this process (a random transform, ``num_workers=0``) then draws for the next batch what it drew before."""
    states = rng_states()
    for _ in range(count):
        next(batches)
    restore_rng_states(states)


def _samplers_in(*samplers: Any) -> list[Any]:
    """The samplers given and those they wrap: a BatchSampler's ``sampler``, and the user's sampler
    inside the ``DistributedSamplerWrapper`` Lightning puts around it under DDP (as ``dataset._sampler``)."""
    found: list[Any] = []
    todo = [s for s in samplers if s is not None]
    while todo:
        sampler = todo.pop()
        if any(sampler is seen for seen in found):
            continue
        found.append(sampler)
        inner = [getattr(sampler, "sampler", None), getattr(getattr(sampler, "dataset", None), "_sampler", None)]
        todo += [s for s in inner if s is not None]
    return found
