"""Advice to Linux about the pages under CPU tensors: huge pages for the memory materialization fills,
and none for a checkpoint's mapped pages once copied out.

The first write to fresh memory takes a page fault per page: with 4 KiB pages, 127,000 faults for a
500 MB model, which cost about as much as copying it out of a checkpoint. Linux's transparent huge pages
map 2 MiB per fault, and in the kernel's default mode ("madvise") only memory that asks for them with
``madvise(MADV_HUGEPAGE)`` gets them (torch asks for every allocation only when
``THP_MEM_ALLOC_ENABLE=1`` is set before it is imported). Advice only: with transparent huge pages off,
or on another system, nothing changes, and the values written are the same either way. The advice
stays with the memory when the tensor is freed (glibc may keep it in its heap for later allocations):
memory the model's tensors filled once, which the process held at its peak anyway.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
from collections.abc import Callable

import torch

__all__ = ["MADV_DONTNEED", "MADV_HUGEPAGE", "advise", "advise_huge_pages", "whole_pages"]

MADV_DONTNEED = 4  # linux/mman.h
MADV_HUGEPAGE = 14
_HUGE_PAGE = 2 << 20


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's madvise, or None where there is none to call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def whole_pages(start: int, end: int) -> tuple[int, int]:
    """The first and past-the-last address of the whole pages inside [start, end)."""
    return -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE


def advise(start: int, end: int, advice: int) -> None:
    """``madvise`` the whole pages in the addresses [start, end); refused or not Linux, nothing changes."""
    madvise = _madvise()
    first, last = whole_pages(start, end)
    if madvise is not None and last > first:
        madvise(first, last - first, advice)


def advise_huge_pages(tensor: torch.Tensor) -> torch.Tensor:
    """Ask for huge pages under ``tensor``'s memory, before anything is written to it; return it.

    Only for CPU storages of two huge pages or more (a smaller one holds no whole aligned huge page)."""
    storage = tensor.untyped_storage()
    if tensor.device.type == "cpu" and storage.nbytes() >= 2 * _HUGE_PAGE:
        advise(storage.data_ptr(), storage.data_ptr() + storage.nbytes(), MADV_HUGEPAGE)
    return tensor
