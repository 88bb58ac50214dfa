"""dataloader.throughput: can storage and the input pipeline feed the GPUs?

Reads a dataset the way training does (torch DataLoader with worker processes; tf.data in its own
process when tensorflow is installed), after a warm-up, several passes, each from a cold page cache
where the kernel allows, and compares the median samples/s with what the GPUs consume, in the loader's
own samples: `required_samples_per_s` for the node, `required_samples_per_s_per_gpu` times the GPUs, or
the rate `scaling.multi_gpu` measured when it timed the team's own model (scaling.workload). Its
reference model's sample is one 4096-float vector, not a loader's sample, so that rate is never demand.
It also describes the files (count, size distribution) and warns about the small-files pattern.
"""

from __future__ import annotations

import importlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight.machine.frameworks import installed
from preflight.core.check import CannotMeasure, Check, Expect, Outcome, measure, outcome_from_findings, param
from preflight.engine.context import NodeContext
from preflight_checks.dataloader.demand import SCALING_CHECK, demand_from, facts_demand, scaling_facts  # noqa: F401
from preflight.core.model import FIGURE_RATE, Finding, Measurement, Status

MB = 1e6
KIB = 1024
# tf.data reads on the CPU: hidden from the GPUs, tensorflow cannot reserve their memory.
TF_WORKER_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
SHARDING_REMEDY = (
    "shard the dataset into large files (WebDataset .tar shards or TFRecord files of 100 MB-1 GB) so the "
    "loader streams sequentially instead of opening one small file per sample"
)


def default_num_workers() -> int:
    # One loader worker per usable core, leaving one for the process that consumes the batches.
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus - 1, 64))


@dataclass
class Params:
    # The dataset to read: a directory and a glob below it. Unset: a synthetic set in the scratch dir.
    path: str | None = param(None, kind="path",
                             help=("directory of the dataset to read (unset: a synthetic set in the scratch "
                                   "directory)"))
    glob: str = param("**/*", kind="text", help="pattern of the files to read below path")
    # Unset: one per usable core minus one (capped at 64). One DataLoader with all of them stands in for
    # the per-rank loaders of an 8-GPU job, which share the same cores and the same storage.
    num_workers: int | None = param(None, kind="count",
                                    help=("DataLoader worker processes (count); unset: one per usable core minus "
                                          "one, at most 64"))
    batch_size: int = param(64, kind="count", minimum=1, help="samples per batch (count)")
    # Median of this many timed passes; each starts with warmup_batches untimed (workers starting).
    passes: int = param(3, kind="count", minimum=1, help="timed passes over the data; the median is judged (count)")
    warmup_batches: int = param(5, kind="count", help="untimed batches at the start of each pass (count)")
    # Bounds on each pass, so a huge dataset is sampled rather than read in full.
    max_samples_per_pass: int = param(20000, kind="count", minimum=1, help="most samples read in one pass (count)")
    max_seconds_per_pass: float = param(30.0, kind="duration", help="longest one pass may read (seconds)")
    # Listing stops here (and says so): a file-per-sample dataset on a network filesystem can take
    # minutes just to stat.
    max_files_listed: int = param(2_000_000, kind="count", minimum=1,
                                  help="most files listed before the listing stops and says so (count)")
    # The small-files pattern: more than this many files with a median under this size. Each file
    # costs an open, a metadata lookup and a short read, and network filesystems serve those far more
    # slowly than large sequential reads.
    small_files_count: int = param(10_000, kind="count",
                                   help="file count above which many small files are reported (count)")
    small_files_median_bytes: int = param(256 * KIB, kind="size",
                                          help="median file size below which files count as small (bytes)")
    # The synthetic set: count and (channels, height, width) of uint8 pixels: 2000 x 48 KiB, about 98 MB.
    synthetic_files: int = param(2000, kind="count", minimum=1, help="files in the synthetic set (count)")
    synthetic_shape: list[int] = param(kind="count", minimum=1, factory=lambda: [3, 128, 128],
                                       help="channels, height and width of each synthetic sample (uint8 pixels)")
    # "package.module:factory" returning a map-style torch Dataset, called with dataset_kwargs, so the
    # team's own decoding and augmentation are what is timed.
    dataset: str | None = param(None, kind="text",
                                help='your Dataset to time instead of plain file reads: "package.module:factory"')
    dataset_kwargs: dict[str, Any] | None = param(None, kind="table",
                                                  help="keyword arguments for the dataset factory")
    # What the GPUs consume, in the loader's samples per second: for the whole node, or per GPU (times
    # the node's GPUs). Unset, the rate scaling.multi_gpu measured is used only when it timed the team's
    # own model (scaling.workload): its reference model's sample is a 4096-float vector, not an image.
    required_samples_per_s: float | None = param(None, kind="threshold",
                                                 help=("what the GPUs of the whole node consume (samples/s); "
                                                       "unset: from scaling.multi_gpu"))
    required_samples_per_s_per_gpu: float | None = param(None, kind="threshold",
                                                         help=("what one GPU consumes (samples/s), times the "
                                                               "node's GPUs"))
    # The loader must beat the demand by this factor: loader throughput varies with storage load and
    # with the CPU that augmentation and the training process itself take.
    margin: float = param(1.2, kind="threshold", help="factor by which the loader must beat the demand (ratio)")
    # Ask the kernel to drop each file from the page cache before a pass (posix_fadvise DONTNEED).
    drop_cache: bool = param(True, kind="flag",
                             help=("drop each file from the page cache before a pass, so storage is measured "
                                   "(true/false)"))
    tensorflow: bool = param(True, kind="flag",
                             help="also time a tf.data pipeline where tensorflow is installed (true/false)")
    seed: int = param(0, kind="count", help="random seed of the synthetic set and the shuffling (integer)")


# ---------------------------------------------------------------------------------------------------

def load_factory(spec: str, kwargs: dict[str, Any] | None) -> Any:
    """Import "package.module:factory", call it, and return the dataset; CannotMeasure with the reason."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CannotMeasure(f"dataloader.dataset {spec!r} is not of the form 'package.module:factory'")
    if os.getcwd() not in sys.path:
        # The check process starts without the working directory on its import path (nothing there may
        # stand in for torch); the team's dataset module may live there: it is searched last.
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the configuration's problem
        raise CannotMeasure(f"dataloader.dataset {spec!r}: cannot import module {module_name!r}: "
                            f"{type(exc).__name__}: {exc}") from exc
    factory = module
    for part in attribute.split("."):
        if not hasattr(factory, part):
            raise CannotMeasure(f"dataloader.dataset {spec!r}: module {module_name!r} has no attribute {attribute!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise CannotMeasure(f"dataloader.dataset {spec!r}: {attribute!r} is not callable")
    try:
        dataset = factory(**(kwargs or {}))
    except Exception as exc:  # noqa: BLE001
        raise CannotMeasure(f"dataloader.dataset {spec!r}: the factory raised {type(exc).__name__}: {exc}") from exc
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise CannotMeasure(f"dataloader.dataset {spec!r} returned a {type(dataset).__name__}, not a map-style "
                            "Dataset (one with __getitem__ and __len__)")
    if len(dataset) == 0:
        raise CannotMeasure(f"dataloader.dataset {spec!r} returned an empty dataset")
    return dataset


def _summarise_passes(passes: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [p["samples"] / p["seconds"] for p in passes if p["seconds"] > 0 and p["samples"] > 0]
    mb = [p["bytes"] / p["seconds"] / MB for p in passes
          if p["seconds"] > 0 and p["samples"] > 0 and p.get("bytes") is not None]
    return {
        "passes": passes,
        "samples_per_s_samples": rates,
        "mb_per_s_samples": mb,
        "samples_per_s": statistics.median(rates) if rates else None,
        "mb_per_s": statistics.median(mb) if mb else None,
    }


def measure_torch(dataset: Any, params: Params, num_workers: int, collate: Any, counts_bytes: bool,
                  paths: list[str] | None, deadline: float) -> dict[str, Any]:
    """Median samples/s and MB/s of a torch DataLoader over `passes` passes after warm-up batches."""
    import torch
    from torch.utils.data import DataLoader

    from preflight.workers.dataloader_files import drop_cache

    picker = random.Random(params.seed)
    indices = list(range(len(dataset)))
    passes = []
    for number in range(max(1, params.passes)):
        if time.monotonic() > deadline and passes:
            break
        chosen = picker.sample(indices, min(len(indices), params.max_samples_per_pass))
        cache_dropped = bool(paths) and params.drop_cache and drop_cache([paths[i] for i in chosen])
        loader = DataLoader(
            dataset, batch_size=params.batch_size, sampler=chosen, num_workers=num_workers,
            collate_fn=collate, pin_memory=torch.cuda.is_available(),
            prefetch_factor=4 if num_workers else None,
            # A worker stuck on storage must end the measurement, not hang it.
            timeout=120 if num_workers else 0,
        )
        batches = -(-len(chosen) // params.batch_size)
        warmup = min(params.warmup_batches, batches // 4)
        samples = data_bytes = 0
        started = time.perf_counter()
        timed_from = started if warmup == 0 else None
        for index, batch in enumerate(loader):
            if timed_from is not None:
                samples += min(params.batch_size, len(chosen) - index * params.batch_size)
                if counts_bytes:
                    data_bytes += int(batch[1])
            if index + 1 == warmup:
                timed_from = time.perf_counter()
            if timed_from is not None and time.perf_counter() - timed_from > params.max_seconds_per_pass:
                break
        seconds = time.perf_counter() - (timed_from or started)
        del loader  # ends its worker processes before the next pass starts its own
        passes.append({"pass": number, "samples": samples, "bytes": data_bytes if counts_bytes else None,
                       "seconds": seconds, "warmup_batches": warmup, "cache_dropped": cache_dropped})
    return {"version": torch.__version__, "num_workers": num_workers, **_summarise_passes(passes)}


def _collate_decoded(batch: list[tuple[Any, int]]) -> tuple[Any, int]:
    import torch

    return torch.stack([item[0] for item in batch]), sum(item[1] for item in batch)


def measure_tensorflow(ctx: NodeContext, paths: list[str], params: Params, decode: bool, scratch: Path) -> dict[str, Any]:
    listing = scratch / "tf-files.txt"
    listing.write_text("\n".join(paths) + "\n", encoding="utf-8")
    argv = [sys.executable, "-m", "preflight.workers.dataloader_tf", "--files", str(listing),
            "--batch-size", str(params.batch_size), "--passes", str(max(1, params.passes)),
            "--warmup-batches", str(params.warmup_batches), "--max-samples", str(params.max_samples_per_pass),
            "--max-seconds", str(params.max_seconds_per_pass), "--seed", str(params.seed)]
    argv += ["--decode"] if decode else []
    argv += ["--drop-cache"] if params.drop_cache else []
    try:
        proc = ctx.run(argv, timeout=max(30.0, ctx.time_left() - 10), env=TF_WORKER_ENV)
    except CannotMeasure as exc:
        return {"error": str(exc)}
    from preflight.core.jsonlines import last_json

    result = last_json(proc.stdout)
    if result is not None:
        if "error" in result:
            return {"error": result["error"]}
        return {"version": result.get("tensorflow"), "gpus_hidden": result.get("gpus_hidden"),
                **_summarise_passes(result["passes"])}
    return {"error": f"the tf.data worker exited with {proc.returncode} without a result: {proc.stderr[-500:]}"}


FIX_SLOW = ("raise DataLoader num_workers and prefetch_factor (persistent_workers=True, pin_memory=True), or "
            "tf.data num_parallel_calls=AUTOTUNE with prefetch; move decoding to the GPU (DALI) or pre-process "
            "offline; stage the dataset on local NVMe")
FIX_NO_DEMAND = ("State what the GPUs consume, in the loader's samples per second for the whole node: "
                 "`--set dataloader.throughput.required_samples_per_s=N` (or `required_samples_per_s_per_gpu`, "
                 "under `[checks.\"dataloader.throughput\"]` in preflight.toml), measured from one training step of "
                 "your model; or set scaling.workload to your model so scaling.multi_gpu measures it.")


class DataloaderThroughput(Check):
    id = "dataloader.throughput"
    title = "Data loading: can storage and the input pipeline feed the GPUs"
    tags = ("storage", "data", "torch", "tensorflow")
    why = (
        "GPUs that wait for data train at the speed of the disk. A loader slower than the GPUs' appetite "
        "wastes every GPU-hour by the same fraction, and datasets stored as millions of small files are the "
        "most common reason: each sample costs a file open and a metadata round trip on shared storage."
    )
    remediation = (
        "Small files: " + SHARDING_REMEDY + ".",
        "Raise DataLoader num_workers (and prefetch_factor), use persistent_workers=True and pin_memory=True; "
        "with tf.data, use num_parallel_calls=AUTOTUNE, prefetch, and interleave over shards.",
        "Move decoding and augmentation to the GPU (NVIDIA DALI, torchvision.io.decode_jpeg on CUDA), or "
        "pre-process once offline.",
        "Stage the dataset on local NVMe before training, or use a faster storage tier.",
    )
    fixes = {
        "small-files": SHARDING_REMEDY,
        "no-framework": "Install torch or tensorflow into the Python that runs preflight.",
        "no-figure": "Read the check's evidence: neither loader produced a figure.",
        "below-demand": FIX_SLOW,
        "no-demand": FIX_NO_DEMAND,
        "below-margin": FIX_SLOW,
        "loader-failed": ("Run the dataset through the loader by hand to see the error; a dataset factory "
                          "(dataloader.dataset) must return a map-style torch Dataset."),
        "no-samples": "Read more per pass (max_samples_per_pass, max_seconds_per_pass) than the warm-up batches.",
    }
    Params = Params
    timeout_s = 600.0
    levels = {
        "quick": {"skip": "it builds or lists a dataset and times several passes of up to 30 s each"},
        "thorough": {"timeout": 1800, "passes": 5, "max_seconds_per_pass": 60.0, "max_samples_per_pass": 100000},
    }
    run_after = (SCALING_CHECK,)

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        has_torch, has_tf = installed("torch"), installed("tensorflow")
        num_workers = params.num_workers if params.num_workers is not None else default_num_workers()
        facts: dict[str, Any] = {
            "source": "factory" if params.dataset else ("files" if params.path else "synthetic"),
            "path": params.path, "glob": params.glob, "dataset": params.dataset,
            "cpu_count": os.cpu_count(), "num_workers": num_workers, "batch_size": params.batch_size,
            "frameworks": {"torch": has_torch, "tensorflow": has_tf},
            "scaling": scaling_facts(ctx.earlier), "gpu_count": ctx.expect.gpus_per_node or _gpu_count(),
            "files": None, "synthetic": None, "torch": None, "tensorflow": None,
        }
        if params.dataset and not has_torch:
            raise CannotMeasure(f"dataloader.dataset {params.dataset!r} needs torch, which is not installed")
        if not has_torch and not has_tf and not params.path:
            # Nothing could read a synthetic set (and writing one needs numpy, which comes with the
            # frameworks): evaluate() says SKIP. A real dataset path is still listed for the small-files check.
            return facts
        deadline = time.monotonic() + max(5.0, ctx.time_left() - 30)
        Path(ctx.scratch_dir).mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="dataloader-", dir=ctx.scratch_dir))
        try:
            paths, decode = self._files(params, facts, scratch)
            if has_torch:
                facts["torch"] = self._measure_torch(params, facts, num_workers, paths, decode, deadline)
            if has_tf and params.tensorflow and paths and not params.dataset:
                facts["tensorflow"] = measure_tensorflow(ctx, paths, params, decode, scratch)
            elif has_tf and params.dataset:
                facts["tensorflow"] = {"skipped": "dataloader.dataset is a torch Dataset; tf.data was not measured"}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return facts

    @staticmethod
    def _files(params: Params, facts: dict[str, Any], scratch: Path) -> tuple[list[str], bool]:
        """(the files the passes read, whether they are to be decoded): the dataset path's files, listed,
        or a synthetic set written to scratch; none for a dataset factory. Records what it found in facts."""
        from preflight.workers.dataloader_files import list_files, size_distribution, write_synthetic

        if params.path:
            root = Path(params.path)
            if not root.is_dir():
                raise CannotMeasure(f"dataloader.path {params.path} is not a directory"
                                    + ("" if root.exists() else " (it does not exist)"))
            start = time.monotonic()
            paths, sizes, truncated = list_files(root, params.glob, params.max_files_listed)
            facts["files"] = {**size_distribution(sizes), "truncated": truncated,
                              "list_seconds": round(time.monotonic() - start, 3)}
            if not paths and not params.dataset:
                raise CannotMeasure(f"no files match {params.glob!r} under {params.path}")
            return paths, False
        if params.dataset:
            return [], False
        shape = tuple(int(v) for v in params.synthetic_shape)
        if len(shape) != 3:
            raise CannotMeasure("dataloader.synthetic_shape must be [channels, height, width]")
        start = time.monotonic()
        written = write_synthetic(scratch / "synthetic", params.synthetic_files, shape, params.seed)
        os.sync()  # so the passes read from storage, not from dirty pages
        paths = [str(p) for p in written]
        sizes = [os.path.getsize(p) for p in paths]
        facts["synthetic"] = {"files": len(paths), "shape": list(shape), "dir": str(scratch / "synthetic"),
                              "write_seconds": round(time.monotonic() - start, 3)}
        facts["files"] = {**size_distribution(sizes), "truncated": False}
        return paths, True

    @staticmethod
    def _measure_torch(params: Params, facts: dict[str, Any], num_workers: int, paths: list[str], decode: bool,
                       deadline: float) -> dict[str, Any]:
        """The torch DataLoader's passes over the dataset factory's Dataset, or over the files."""
        from preflight.workers.dataloader_files import FileDataset, collate_raw

        if params.dataset:
            dataset = load_factory(params.dataset, params.dataset_kwargs)
            facts["dataset_length"] = len(dataset)
            loader_args = (dataset, params, num_workers, None, False, None, deadline)
        else:
            loader_args = (FileDataset(paths, decode=decode), params, num_workers,
                           _collate_decoded if decode else collate_raw, True, paths, deadline)
        try:
            return measure_torch(*loader_args)
        except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
            first = str(exc).strip().splitlines()
            raise CannotMeasure(f"the torch DataLoader failed: {type(exc).__name__}: {first[0] if first else ''}") from exc

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        findings: list[Finding] = []
        measurements: list[Measurement] = []
        details: list[str] = []
        files = facts.get("files")
        source = facts.get("source")
        syn = facts.get("synthetic") or {}
        if source == "synthetic" and syn.get("files"):
            # Only once it was written: a skipped check wrote no dataset and says nothing about one.
            details.append(f"synthetic dataset: {syn.get('files')} files of {syn.get('shape')} uint8 pixels written "
                           "to the scratch directory (set dataloader.path to measure your data)")
        elif source == "factory":
            details.append(f"dataset from {facts.get('dataset')}: {facts.get('dataset_length')} samples")

        if files:
            details.append(
                f"files: {files['count']}{'+ (listing stopped at the limit)' if files.get('truncated') else ''}, "
                f"{files['total_bytes'] / MB:.1f} MB, size median {_size(files['median_bytes'])}, "
                f"p10 {_size(files['p10_bytes'])}, p90 {_size(files['p90_bytes'])}")
            measurements.append(measure("files", files["count"], ""))
            measurements.append(measure("median file size", round((files["median_bytes"] or 0) / KIB, 1), "KiB"))
            if (files["count"] > params.small_files_count and files["median_bytes"] is not None
                    and files["median_bytes"] < params.small_files_median_bytes):
                findings.append(self.finding("small-files", Status.WARN,
                                             f"small-files pattern: {files['count']} files with a median of "
                                             f"{_size(files['median_bytes'])} (more than {params.small_files_count} "
                                             f"under {_size(params.small_files_median_bytes)}): {SHARDING_REMEDY}"))

        frameworks = facts.get("frameworks", {})
        if not frameworks.get("torch") and not frameworks.get("tensorflow"):
            findings.append(self.finding("no-framework", Status.SKIP,
                                         "neither torch nor tensorflow is installed: no loader to measure"))
            return _outcome(findings, measurements, details, "")

        loaders = self._loaders(facts, findings, measurements, details)
        if not loaders and not [f for f in findings if f.level is not Status.PASS]:
            findings.append(self.finding("no-figure", Status.ERROR, "no loader produced a figure"))
            return _outcome(findings, measurements, details, "")

        demand = facts_demand(facts, params, expect.gpus_per_node)
        headline = ""
        if loaders and demand and demand.get("samples_per_s"):
            judged = self._judged_loaders(loaders, expect)
            label, result = max(judged.items(), key=lambda item: item[1]["samples_per_s"])
            need = demand["samples_per_s"]
            supply = result["samples_per_s"]
            percent = supply / need * 100
            headline = f"the loader can feed {percent:.0f}% of what the GPUs consume"
            details.append(f"{headline} ({label}: {supply:.1f} samples/s; GPUs: {need:.1f} samples/s from "
                           f"{demand['source']}; required with margin {params.margin}: {need * params.margin:.1f})")
            for shown in loaders:
                measurements.append(measure(f"GPU demand samples/s ({shown})", round(need, 1), "samples/s",
                                            figure=FIGURE_RATE, series="demand", at=shown))
            measurements.append(measure(f"{label} vs GPU demand", round(percent, 1), "%",
                                        at_least=round(params.margin * 100, 1), param="margin"))
            if supply < need:
                findings.append(self.finding("below-demand", Status.FAIL, f"{headline}: {label} delivers {supply:.1f} "
                                             f"samples/s, the GPUs consume {need:.1f}"))
            elif supply < need * params.margin:
                findings.append(self.finding("below-margin", Status.WARN, f"{headline}: less than the {params.margin}x "
                                             f"margin ({need * params.margin:.1f} samples/s)"))
        elif loaders:
            label, result = max(loaders.items(), key=lambda item: item[1]["samples_per_s"])
            why = f" ({demand['ignored']})" if demand and demand.get("ignored") else ""
            headline = (f"{label} supplies {result['samples_per_s']:.0f} samples/s, compared with nothing: no "
                        f"figure says what the GPUs consume{why}")
            findings.append(self.finding("no-demand", Status.WARN, headline))
            if why:
                details.append(demand["ignored"])
        return _outcome(findings, measurements, details, headline, loaders)

    @staticmethod
    def _loaders(facts: dict[str, Any], findings: list[Finding], measurements: list[Measurement],
                 details: list[str]) -> dict[str, dict[str, Any]]:
        loaders = {}
        for name, label in (("torch", "torch DataLoader"), ("tensorflow", "tf.data")):
            result = facts.get(name)
            if not result:
                continue
            if result.get("skipped"):
                details.append(f"{label}: {result['skipped']}")
                continue
            if result.get("error"):
                findings.append(DataloaderThroughput.finding("loader-failed", Status.WARN,
                                                             f"{label} could not be measured: {result['error']}"))
                continue
            if result.get("samples_per_s") is None:
                findings.append(DataloaderThroughput.finding("no-samples", Status.WARN,
                                                             f"{label} read no samples after the warm-up"))
                continue
            loaders[label] = result
            rate = round(result["samples_per_s"], 1)
            measurements.append(measure(f"{label} samples/s", rate, "samples/s",
                                        samples=[round(v, 1) for v in result["samples_per_s_samples"]],
                                        figure=FIGURE_RATE, series="supply", at=label, better="higher"))
            if result.get("mb_per_s") is not None:
                measurements.append(measure(f"{label} MB/s", round(result["mb_per_s"], 1), "MB/s",
                                            samples=[round(v, 1) for v in result["mb_per_s_samples"]]))
            workers = f", {result['num_workers']} workers" if "num_workers" in result else ""
            details.append(f"{label} {result.get('version', '')}: {rate} samples/s{workers}, median of "
                           f"{len(result['samples_per_s_samples'])} passes")
            passes = result.get("passes") or []
            if passes and not all(p.get("cache_dropped") for p in passes):
                details.append(f"{label}: the page cache was not dropped before every pass; figures may be memory speed")
        return loaders

    @staticmethod
    def _judged_loaders(loaders: dict[str, dict[str, Any]], expect: Expect) -> dict[str, dict[str, Any]]:
        """The loaders of the frameworks the team uses; all measured ones when it did not say."""
        wanted = {"torch": "torch DataLoader", "tensorflow": "tf.data"}
        chosen = {wanted[f]: loaders[wanted[f]] for f in expect.frameworks or [] if wanted.get(f) in loaders}
        return chosen or loaders


def _outcome(findings: list[Finding], measurements: list[Measurement], details: list[str], headline: str,
             loaders: dict[str, dict[str, Any]] | None = None) -> Outcome:
    rates = ", ".join(f"{label} {r['samples_per_s']:.0f} samples/s" for label, r in (loaders or {}).items())
    return outcome_from_findings(findings, measurements, passed="; ".join(p for p in (rates, headline) if p),
                                 notes=details)


def _gpu_count() -> int | None:
    """The node's GPUs as NVML counts them (no CUDA context is created); None without a driver."""
    from preflight.workers.gpu_nvml import nvml_facts

    facts = nvml_facts(with_gpus=False)
    return facts.get("device_count") if facts.get("available") else None


def _size(value: int | None) -> str:
    if value is None:
        return "?"
    if value >= KIB * KIB:
        return f"{value / KIB / KIB:.1f} MiB"
    if value >= KIB:
        return f"{value / KIB:.0f} KiB"
    return f"{value} B"
