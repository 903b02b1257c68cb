"""Huge pages under the memory materialization fills: asked for, given where Linux gives them, values unchanged."""

from __future__ import annotations

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


def _huge_kb(tensor: torch.Tensor) -> int:
    """AnonHugePages of the mappings under ``tensor``'s memory, from /proc/self/smaps (advice splits a mapping)."""
    low, high = tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start < high and low < end
        elif inside and head == "AnonHugePages:":
            total += int(line.split()[1])
    return total


@needs_thp
def test_a_large_cpu_tensor_gets_huge_pages_when_asked_before_it_is_written() -> None:
    asked = advise_huge_pages(torch.empty(8 << 20))  # 32 MB
    asked.fill_(1.0)
    assert _huge_kb(asked) >= 8 << 10  # at least 4 huge pages of 2 MiB


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
    assert _huge_kb(model.embed.weight) >= 4 << 10
    if mode == "exact":
        for (name, got), want in zip(model.state_dict().items(), eager.state_dict().values(), strict=True):
            assert torch.equal(got, want), name
