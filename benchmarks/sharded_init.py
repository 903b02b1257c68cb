"""Sharded init on CPU: csx_fsdp vs Lightning's ModelParallelStrategy vs csx on one process.

A GPT-style model (~850 MiB float32, nanoGPT init: tied head, ``apply(_init_weights)``, scaled
projections) trained for one step on random tokens. Each case runs in a fresh launch
(Lightning starts the other ranks); per rank it reports:

* setup: from ``configure_model`` to the end of setup (build, materialize, shard), seconds, wall
  and CPU (``time.process_time``: all of the process's threads; on a shared machine wall time
  also counts waiting for a core);
* mater.: the csx strategies' own materialization phase within setup (``ttfl/materialize``), seconds;
* peak: the process's peak RSS during setup above its RSS right before ``configure_model``
  (``/proc/self/clear_refs`` resets the peak there), as a fraction of the model's bytes;
* first loss: from ``trainer.fit`` to the first loss, seconds;
* weights: a digest of the gathered weights, compared with one-process eager (``csx``).

Cases:

* ``csx``: ``strategy="csx"``, one process, exact (the reference), on all its threads (torch's
  default: one per core; exact generation then runs on all of them).
* ``csx 1 thread``: the same on one thread, the share of the machine each of 2 ranks has on 2 cores.
* ``csx_fsdp xN``: ``strategy="csx_fsdp"``, N ranks, each making only its rows, exactly.
* ``ModelParallel xN``: Lightning's ModelParallelStrategy (data-parallel N), the user's
  ``configure_model`` builds on the meta device and calls ``fully_shard`` itself; Lightning
  materializes with ``to_empty`` + ``reset_parameters`` (the custom init is lost).
* ``csx_fsdp ckpt xN``: ``csx_fsdp`` resuming from a single-file checkpoint of the model (written
  by ``csx_fsdp`` with ``state_dict_type="full"``): each rank copies its rows out of the mapped file.
  ``anon`` is then the growth of anonymous memory over setup (mapped pages count in the peak).

With ``--repeat N`` each case runs N times (rounds interleaved) and the table shows medians.

``--alone`` times materialization alone, each case alone on the machine in a fresh process, no process
group: one process's exact init (on its threads, and on one) against each rank's rows of a csx_fsdp run on
``--ranks`` ranks (what each rank computes, made here one rank after another): the per-rank work, apart from
the ranks' competition for cores and their collectives.

Run: ``python benchmarks/sharded_init.py [--ranks 2 4] [--depth 15] [--repeat 3] [--alone]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from deferred_init import GPT, Config  # the same GPT-2 shaped model
from torch import nn

# ~850 MiB in float32
CASES = ["csx", "csx 1 thread", "csx_fsdp", "ModelParallel", "csx_fsdp ckpt"]
SHAPE = {"vocab": 32000, "width": 1024, "depth": 15, "max_len": 256}


def _rss(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def run_case(case: str, ranks: int, config: Config, out: Path, run: int) -> None:
    """One case, in this (fresh) process and the ranks Lightning starts from it."""
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import ModelParallelStrategy, Strategy
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from torch.utils.data import DataLoader, TensorDataset

    import cs_lightning  # noqa: F401  (registers csx, csx_fsdp)

    class Language(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model: GPT | None = None
            self.times: dict[str, float] = {}

        def configure_model(self) -> None:
            if self.model is not None:
                return
            with open("/proc/self/clear_refs", "w") as clear:  # the peak RSS starts again from here
                clear.write("5")
            self.times["baseline"] = _rss("VmRSS")
            self.times["anon_before"] = _rss("RssAnon")
            self.times["configure"] = time.perf_counter()
            self.times["configure_cpu"] = time.process_time()
            if case != "ModelParallel":
                self.model = GPT(config)
                return
            with torch.device("meta"):  # the user's own sharding, as Lightning's docs show
                self.model = GPT(config)
            assert self.device_mesh is not None  # ModelParallelStrategy sets it before configure_model
            mesh = self.device_mesh["data_parallel"]
            for block in self.model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(self, mesh=mesh)

        def on_fit_start(self) -> None:
            self.times["setup"] = time.perf_counter() - self.times["configure"]
            self.times["setup_cpu"] = time.process_time() - self.times["configure_cpu"]
            self.times["peak"] = _rss("VmHWM") - self.times["baseline"]
            self.times["anon"] = _rss("RssAnon") - self.times["anon_before"]

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            assert self.model is not None  # built in configure_model
            return self.model(tokens)

        def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
            (tokens,) = batch
            logits = self(tokens[:, :-1])
            return nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

        def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
            if "first_loss" not in self.times:
                self.times["first_loss"] = time.perf_counter() - self.times["fit"]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.0)  # no state: the step is not what is measured

    from cs_lightning import CSXFSDPStrategy, TimeToFirstLoss

    pl.seed_everything(0)
    if case == "csx 1 thread":
        torch.set_num_threads(1)
    strategy: str | Strategy = "csx_fsdp" if case.startswith("csx_fsdp") else "csx"
    if case == "ModelParallel":
        strategy = ModelParallelStrategy(data_parallel_size=ranks, tensor_parallel_size=1)
    if case == "save":
        strategy = CSXFSDPStrategy(state_dict_type="full")
    checkpoint = out / "full.ckpt"
    tokens = torch.randint(0, config.vocab, (4 * ranks, 65), generator=torch.Generator().manual_seed(0))
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator="cpu",
        devices=ranks,
        max_steps=0 if case == "save" else 1,
        callbacks=[clock := TimeToFirstLoss()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = Language()
    module.times["fit"] = time.perf_counter()
    trainer.fit(
        module,
        DataLoader(TensorDataset(tokens), batch_size=4),
        ckpt_path=checkpoint if case == "csx_fsdp ckpt" else None,
    )
    if case == "save":
        trainer.save_checkpoint(checkpoint)
        return
    digest = hashlib.sha256()
    assert module.model is not None
    for tensor in module.model.state_dict().values():  # gathered one tensor at a time (collective)
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        digest.update(full.detach().contiguous().view(torch.uint8).numpy().tobytes())
    row = {
        "rank": trainer.global_rank,
        "digest": digest.hexdigest(),
        "threads": torch.get_num_threads(),
        **{k: module.times[k] for k in ("setup", "setup_cpu", "peak", "anon", "first_loss")},
        "materialize": clock.metrics.get("ttfl/materialize", math.nan),  # csx's own phase (ModelParallel: none)
    }
    (out / f"{case}-{ranks}-{trainer.global_rank}-{run}.json").write_text(json.dumps(row))


def materialize_alone(case: str, ranks: int, config: Config) -> dict:
    """Materialization alone, in this fresh process: ``"csx"`` (its threads) and ``"csx 1 thread"`` make the
    whole model exactly; ``"rank R"`` makes rank R's rows of each parameter, as csx_fsdp on ``ranks`` ranks."""
    from cs_lightning.deferred import deferred_init, materialize

    if case != "csx":
        torch.set_num_threads(1)
    torch.manual_seed(0)
    model = deferred_init(GPT, config)
    wall, cpu = time.perf_counter(), time.process_time()
    if case.startswith("rank"):
        _rows_alone(model, int(case.split()[1]), ranks)
    else:
        materialize(model)
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "threads": torch.get_num_threads()}


def _rows_alone(model: nn.Module, rank: int, ranks: int) -> None:
    """Rank ``rank``'s rows (``torch.chunk`` on dim 0) of every parameter, by row replay (as deferred.sharded)."""
    from cs_lightning.deferred.materialize import by_recording, deferred_tensors, module_slots
    from cs_lightning.deferred.pages import advise_huge_pages
    from cs_lightning.deferred.row_replay import replay_rows

    for recording, group in by_recording(deferred_tensors(module_slots(model, {}), {})):
        every_rank = {}
        for entry in group:  # the GPT: float32 parameters only, the tied one listed once
            rows = entry.fake.shape[0]
            starts = [min(rows, r * -(-rows // ranks)) for r in range(ranks)]
            width = math.prod(entry.fake.shape[1:])
            every_rank[entry.ref.sid] = [
                (start * width, min(rows, start + -(-rows // ranks)) * width) for start in starts
            ]
        ranges = {sid: spans[rank] for sid, spans in every_rank.items()}
        # in memory asking for huge pages, as csx_fsdp allocates each rank's shards
        shards = {sid: advise_huge_pages(torch.empty(hi - lo)) for sid, (lo, hi) in ranges.items()}
        ignore = lambda *args: None
        replay_rows(
            recording,
            ranges=ranges,
            every_rank=every_rank,
            whole=set(),
            keep=set(),
            on_rows=ignore,
            on_whole=ignore,
            agree=lambda ok: ok,
            draw_skipped_tail=True,
            into=shards.get,
        )


def _alone(args: argparse.Namespace) -> None:
    ranks = args.ranks[0]
    cases = ["csx", "csx 1 thread"] + [f"rank {r}" for r in range(ranks)]
    results: dict[str, list[dict]] = {case: [] for case in cases}
    for _ in range(args.repeat):
        for case in cases:
            command = [
                sys.executable,
                __file__,
                "--alone-case",
                case,
                "--ranks",
                str(ranks),
                "--depth",
                str(args.depth),
            ]
            run = subprocess.run(command, check=True, capture_output=True, text=True)
            results[case].append(json.loads(run.stdout.strip().splitlines()[-1]))
    print(f"materialization alone, csx_fsdp on {ranks} ranks, medians of {args.repeat} run(s)")
    print(f"{'case':<14} {'threads':>7} {'wall s':>7} {'cpu s':>6}")
    median = {
        case: {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu")} for case, runs in results.items()
    }
    for case, runs in results.items():
        print(f"{case:<14} {runs[0]['threads']:>7} {median[case]['wall']:>7.2f} {median[case]['cpu']:>6.2f}")
    slowest = max(median[f"rank {r}"]["wall"] for r in range(ranks))
    print(
        f"slowest rank / csx: {slowest / median['csx']['wall']:.2f}x ({results['csx'][0]['threads']} threads),"
        f" {slowest / median['csx 1 thread']['wall']:.2f}x (1 thread)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--depth", type=int, default=SHAPE["depth"])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case; the table shows medians")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES, help="the cases to run (csx always runs)")
    parser.add_argument("--alone", action="store_true", help="materialization alone (see the docstring)")
    parser.add_argument("--alone-case", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    config = Config(**{**SHAPE, "depth": args.depth})
    if args.case:
        run_case(args.case, args.ranks[0], config, Path(args.out), args.run)
        return
    if args.alone_case:
        print(json.dumps(materialize_alone(args.alone_case, args.ranks[0], config)))
        return
    if args.alone:
        _alone(args)
        return
    cases = [("csx", 1), ("csx 1 thread", 1)] + [
        (case, n) for n in args.ranks for case in ("csx_fsdp", "ModelParallel")
    ]
    cases += [("csx_fsdp ckpt", n) for n in args.ranks]
    cases = [(case, n) for case, n in cases if case in args.cases or case == "csx"]
    save = [("save", 2, 0)] if "csx_fsdp ckpt" in args.cases else []
    runs = save + [(case, n, k) for k in range(args.repeat) for case, n in cases]
    with tempfile.TemporaryDirectory() as tmp:
        for case, ranks, k in runs:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--case",
                    case,
                    "--ranks",
                    str(ranks),
                    "--depth",
                    str(args.depth),
                    "--run",
                    str(k),
                    "--out",
                    tmp,
                ],
                check=True,
                capture_output=True,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
        rows = {(case, n): [_median_row(Path(tmp), case, n, r, args.repeat) for r in range(n)] for case, n in cases}
    _report(rows, config, args.repeat)


def _median_row(folder: Path, case: str, ranks: int, rank: int, repeat: int) -> dict:
    """One rank's figures over the runs of a case: the median of each, the digests all required equal."""
    runs = [json.loads((folder / f"{case}-{ranks}-{rank}-{k}.json").read_text()) for k in range(repeat)]
    row = {
        key: statistics.median(run[key] for run in runs)
        for key in ("setup", "setup_cpu", "materialize", "peak", "anon", "first_loss")
    }
    digests = {run["digest"] for run in runs}
    return {
        **row,
        "rank": rank,
        "threads": runs[0]["threads"],
        "digest": digests.pop() if len(digests) == 1 else "varies",
    }


def _report(rows: dict, config: Config, repeat: int) -> None:
    model_bytes = 4 * sum(p.numel() for p in GPT(config).parameters())
    reference = rows[("csx", 1)][0]
    print(
        f"GPT-style model, {model_bytes / 2**20:.0f} MiB float32, torch {torch.__version__},"
        f" {os.cpu_count()} cores, csx on {reference['threads']} threads; medians of {repeat} run(s)"
    )
    print(
        f"{'case':<18} {'rank':>4} {'threads':>7} {'setup s':>8} {'cpu s':>6} {'mater. s':>9}"
        f" {'peak / model':>13} {'anon / model':>13}"
        f" {'first loss s':>13}  weights"
    )
    for (case, n), ranks in rows.items():
        for r in ranks:
            same = "== csx (eager)" if r["digest"] == reference["digest"] else "DIFFERENT"
            print(
                f"{case + (f' x{n}' if n > 1 else ''):<18} {r['rank']:>4} {r['threads']:>7} {r['setup']:>8.2f}"
                f" {r['setup_cpu']:>6.2f} {r['materialize']:>9.2f}"
                f" {r['peak'] / model_bytes:>13.2f} {r['anon'] / model_bytes:>13.2f} {r['first_loss']:>13.2f}  {same}"
            )
    print()
    one_thread = rows.get(("csx 1 thread", 1), [{"setup": math.nan, "materialize": math.nan}])[0]
    for (case, n), ranks in rows.items():
        if n == 1:
            continue
        slowest = max(r["setup"] for r in ranks)
        materialize = max(r["materialize"] for r in ranks)
        peak = max(r["peak"] for r in ranks) / model_bytes
        anon = max(r["anon"] for r in ranks) / model_bytes
        parts = [
            f"slowest rank's setup / csx's: {slowest / reference['setup']:.2f}x ({reference['threads']} threads),"
            f" {slowest / one_thread['setup']:.2f}x (1 thread)",
            f"worst rank's peak: {peak:.2f}x the model, anonymous growth {anon:.2f}x",
        ]
        if not math.isnan(materialize):  # the csx strategies time their materialization
            parts.insert(
                1,
                f"slowest rank's materialization / csx's: {materialize / reference['materialize']:.2f}x,"
                f" {materialize / one_thread['materialize']:.2f}x (1 thread)",
            )
        print(f"{case} x{n}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
