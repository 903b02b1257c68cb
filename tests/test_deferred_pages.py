"""Huge pages under the memory materialization fills: asked for, given where Linux gives them, values unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from cs_lightning.deferred import deferred_init, materialize
from cs_lightning.deferred.pages import advise_huge_pages

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
needs_thp = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _THP.exists() or "[never]" in _THP.read_text(),
    reason="transparent huge pages are off here",
)


def _mappings(tensor: torch.Tensor) -> list[dict[str, str]]:
    """The fields of /proc/self/smaps of the mappings under ``tensor``'s memory (advice splits a mapping)."""
    low, high = tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()
    found: list[dict[str, str]] = []
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start < high and low < end
            found += [{}] if inside else []
        elif inside:
            found[-1][head.rstrip(":")] = rest.strip()
    return found


def _asked(tensor: torch.Tensor) -> bool:
    """Whether huge pages were asked for under ``tensor`` (its mappings' VmFlags hold "hg"). Whether they were
    given depends on the process: memory the allocator reuses is already backed by small pages."""
    return any("hg" in mapping.get("VmFlags", "").split() for mapping in _mappings(tensor))


@needs_thp
def test_a_large_cpu_tensor_gets_huge_pages_when_asked_before_it_is_written() -> None:
    """In a fresh process, so that the memory is new: 2 MiB pages back it."""
    script = (
        "import torch\nfrom pathlib import Path\nfrom cs_lightning.deferred.pages import advise_huge_pages\n"
        "asked = advise_huge_pages(torch.empty(8 << 20)); asked.fill_(1.0)\n"
        "print(Path('/proc/self/smaps_rollup').read_text().split('AnonHugePages:')[1].split()[0])\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(run.stdout.split()[-1]) >= 8 << 10  # at least 4 huge pages of 2 MiB (kB)


def test_small_and_non_cpu_tensors_are_left_as_they_are() -> None:
    small = torch.empty(1000)
    assert advise_huge_pages(small) is small
    meta = torch.empty(8 << 20, device="meta")
    assert advise_huge_pages(meta) is meta


class Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(8192, 512)  # 16 MB
        self.proj = nn.Linear(512, 2048)
        nn.init.trunc_normal_(self.proj.weight, std=0.02)


@needs_thp
@pytest.mark.parametrize("mode", ["exact", "independent"])
def test_materialized_weights_sit_on_huge_pages_and_equal_eager(mode: str) -> None:
    torch.manual_seed(3)
    eager = Wide()
    torch.manual_seed(3)
    model = deferred_init(Wide)
    materialize(model, mode=mode)
    assert _asked(model.embed.weight)
    if mode == "exact":
        for (name, got), want in zip(model.state_dict().items(), eager.state_dict().values(), strict=True):
            assert torch.equal(got, want), name


@needs_thp
def test_a_ranks_shards_sit_on_huge_pages() -> None:
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Sharded(L.LightningModule):
        def configure_model(self) -> None:
            self.net = Wide()

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.net.proj(self.net.embed(batch[0])).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    module = Sharded()
    trainer = L.Trainer(
        strategy="csx_fsdp", devices=1, accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, DataLoader(TensorDataset(torch.randint(0, 8192, (8, 4))), batch_size=4))
    assert _asked(module.net.embed.weight.to_local())
