"""checkpoint.roundtrip: checkpoints are written, read back bit for bit, and a killed run resumes exactly.

Four parts, each reported on its own:
- torch: a model, its Adam state and every random-number state, saved with `torch.save` and with
  `torch.distributed.checkpoint` (DCP), fsynced, loaded back and compared byte for byte; write and
  read GB/s, median of `repeats`.
- resume: a short training run (preflight.workers.checkpoint_train) is SIGKILLed between two
  checkpoints, a new process resumes from the newest one, and its final weights must equal, bit for
  bit, those of a run that was never interrupted.
- tensorflow: tf.train.Checkpoint with a CheckpointManager, restored with assert_consumed(), in its
  own process (preflight.workers.checkpoint_tf).
- compat: an old checkpoint the team keeps (`compat_path`) must still load with this stack.

Everything is written under one fresh directory inside `dir`, removed at the end, also on failure.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflight.machine.frameworks import installed
from preflight.core.check import Check, Expect, Learnable, Outcome, measure, outcome_from_findings, param
from preflight.engine.context import NodeContext
from preflight.machine.filesystems import filesystem_type
from preflight.core.model import CAVEAT, FIGURE_RATE, Finding, Measurement, Status


from preflight_checks.checkpoint.formats import compat_test, roundtrip_format
from preflight_checks.checkpoint.resume import resume_test
from preflight_checks.checkpoint.state import build_state, check_memory, count_tensors, pick_device
from preflight_checks.checkpoint.storage import (
    FREE_SPACE_FACTOR, MB, free_bytes, storage_kind_from_text, storage_message, storage_problem_kind,
)
from preflight_checks.checkpoint.tensorflow import tensorflow_test, tf_size_mb


# The `at` label of each format's write and read figures (FIGURE_RATE).
FORMAT_LABELS = {"torch.save": "torch.save", "dcp": "DCP", "tensorflow": "TensorFlow"}
# Slow reads are their own cause: a restart waits on them, and parallel writes do not speed them up.
SLOW_READ_FIX = ("Slow reads make every restart wait: load each rank's own shard in parallel (torch.distributed.checkpoint), "
                 "stage checkpoints on local NVMe before resuming, or spread the checkpoint directory over more "
                 "storage targets (Lustre: lfs setstripe -c -1); measure the filesystem's read rate with fio to compare.")


@dataclass
class Params:
    # Where checkpoints are written. Unset: a scratch directory under the run's output directory,
    # which proves little; point it at the shared filesystem your training job checkpoints to.
    dir: str | None = param(None, kind="path",
                            help=("directory checkpoints are written to; point it at the filesystem training saves "
                                  "to (unset: a scratch directory)"))
    # Size of model plus optimizer state. Large enough that the figure is about the storage and not
    # about Python overhead, small enough to take seconds on a node; raise it toward a real shard size
    # (a 7B model with Adam in fp32 is ~112 GB across the job) for figures that include the page cache's
    # limits.
    size_mb: float = param(256.0, kind="size", help="size of the model plus optimizer state written (MB)")
    # Single-stream write floor. A parallel filesystem (Lustre, GPFS, Weka) or local NVMe gives one
    # writer several GB/s; NFS on 10 GbE tops out near 1 GB/s. Below 1 GB/s one node saving a 100 GB
    # checkpoint stalls training for over a minute and a half each time.
    min_write_gbps: float = param(1.0, kind="threshold", help="lowest single-writer write speed (GB/s)",
                                  learn=Learnable("floor", "checkpoint write rate", figure="rate", series="write",
                                                  unit="GB/s"))
    # Read matters at restart, after a failure, when the whole job waits. Same reasoning as writing.
    min_read_gbps: float = param(1.0, kind="threshold", help="lowest single-reader read speed (GB/s)",
                                 learn=Learnable("floor", "checkpoint read rate", figure="rate", series="read",
                                                 unit="GB/s"))
    # Each format is written and read this many times; the median is judged.
    repeats: int = param(3, kind="count", minimum=1,
                         help="times each format is written and read; the median is judged (count)")
    # "auto": CUDA when torch sees a GPU (the tensors then come from GPU memory, as in training), else CPU.
    device: str = param("auto", kind="text",
                        help='where the tensors live: "auto" (GPU when torch sees one), "cuda" or "cpu"')
    # Also use torch.distributed.checkpoint (the format FSDP and large-model training save with).
    dcp: bool = param(True, kind="flag",
                      help="also use torch.distributed.checkpoint, the format FSDP saves with (true/false)")
    # The kill-and-resume test: steps of the short training run, a checkpoint every save_every steps,
    # and the step after which it is killed (between two checkpoints, so work is lost and redone).
    resume_test: bool = param(True, kind="flag",
                              help=("kill a short training run between checkpoints and check it resumes exactly "
                                    "(true/false)"))
    resume_steps: int = param(40, kind="count", minimum=1, help="steps of the kill-and-resume training run (count)")
    resume_save_every: int = param(10, kind="count", minimum=1, help="steps between its checkpoints (count)")
    resume_kill_after_step: int = param(25, kind="count", minimum=1,
                                        help="step after which the run is killed (step number)")
    seed: int = param(1234, kind="count", help="random seed of the training run (integer)")
    # Size of the tensorflow round trip, at most size_mb (its own process; kept smaller, the torch part
    # already measures the storage).
    tensorflow: bool = param(True, kind="flag",
                             help=("also round-trip a tensorflow checkpoint where tensorflow is installed "
                                   "(true/false)"))
    tf_size_mb: float = param(64.0, kind="size", help="size of the tensorflow checkpoint, at most size_mb (MB)")
    # A checkpoint the team produced with its previous stack (a torch.save file, or a DCP directory):
    # it must still load, with weights_only=True as torch loads by default since 2.6.
    compat_path: str | None = param(None, kind="path",
                                    help=("a checkpoint made with the team's previous stack that must still load "
                                          "(file or DCP directory)"))
    # A DCP directory's metadata is a pickle: read with an unpickler that accepts only what DCP writes.
    compat_trusted: bool = param(False, kind="flag",
                                 help=("unpickle compat_path's DCP metadata in full, for a checkpoint you trust "
                                       "(true/false); false: only what DCP writes"))



def _framework_version(module: str, distributions: tuple[str, ...]) -> str | None:
    if not installed(module):
        return None
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


FIX_STORAGE = ("Point checkpoint.dir at the filesystem your training writes checkpoints to, mounted read-write, with "
               "free space for several checkpoints.")
FIX_SPEED = ("Slow writes: save from every rank in parallel (torch.distributed.checkpoint), save asynchronously, or "
             "write to local NVMe first and copy to shared storage in the background.")
DCP_SLOW_WRITE_FIX = ("torch.distributed.checkpoint already writes each rank's shard in parallel: save "
                      "asynchronously (torch.distributed.checkpoint.async_save), give its FileSystemWriter more "
                      "threads (thread_count), or write to local NVMe first and copy to shared storage in the "
                      "background; measure the filesystem's write rate with fio to compare.")
DCP_SLOW_READ_FIX = ("torch.distributed.checkpoint already loads by shard: stage checkpoints on local NVMe before "
                     "resuming, or spread the checkpoint directory over more storage targets (Lustre: lfs "
                     "setstripe -c -1); measure the filesystem's read rate with fio to compare.")
SCRATCH_FIX = ("Set checkpoint.dir to the filesystem training writes its checkpoints to (--set "
               "checkpoint.roundtrip.dir=PATH, or dir under [checks.\"checkpoint.roundtrip\"] in preflight.toml).")
FIX_STATE = ("Save and restore the model, the optimizer, the step and every random-number state (torch, CUDA, numpy, "
             "Python) together; write to a temporary name, fsync, then rename.")
FIX_COMPAT = ("A checkpoint from the previous stack that no longer loads: pin the old version or convert the "
              "checkpoint before upgrading.")


class CheckpointRoundtrip(Check):
    id = "checkpoint.roundtrip"
    title = "Checkpoints: exact round trip, write/read speed, resume after a kill"
    tags = ("storage", "checkpoint", "torch", "tensorflow")
    why = (
        "A long training run is only as safe as its last checkpoint. A filesystem that cannot be written, "
        "fills up, or returns different bytes loses days of work; a slow one stalls every GPU while it saves; "
        "and a resume that forgets the optimizer or random-number state silently trains a different model."
    )
    remediation = (FIX_STORAGE, FIX_SPEED, FIX_STATE, FIX_COMPAT)
    # Kinds that share a fix share its cause: the storage (FIX_STORAGE), its speed, the saved state.
    fixes = {
        "no-framework": "Install torch or tensorflow into the Python that runs preflight.",
        "compat-broken": FIX_COMPAT,
        "storage-read-only": ("Mount the checkpoint filesystem read-write (`findmnt <dir>` shows ro), or point "
                              "checkpoint.dir at a writable one."),
        "storage-permission": ("Give the job's user write access to the directory (chown/chmod, or the volume's "
                               "securityContext), or point checkpoint.dir elsewhere."),
        "storage-missing": "Create the directory or mount the filesystem that holds it, or fix checkpoint.dir.",
        "storage-not-a-directory": "Point checkpoint.dir at a directory, not at a file.",
        "storage-full": ("Free space on the checkpoint filesystem (old checkpoints), or use a larger volume: several "
                         "checkpoints must fit."),
        "storage-quota": "Raise the quota on the checkpoint filesystem for the job's user or project, or free space.",
        "storage-other": FIX_STORAGE,
        "not-exact": FIX_STORAGE,
        "slow-write": FIX_SPEED,
        "slow-read": SLOW_READ_FIX,
        "scratch-dir" + CAVEAT: SCRATCH_FIX,
        "resume-error": "Read the resume test's output in the details: the short training run could not run or be killed.",
        "resume-no-checkpoint": FIX_STATE,
        "resume-not-exact": FIX_STATE,
        "tensorflow-failed": FIX_STORAGE,
        "tensorflow-not-exact": FIX_STORAGE,
        "tensorflow-stale-latest": FIX_STORAGE,
        "left-behind": "Remove the files named by hand: they are this check's own scratch checkpoints.",
        "compat-refused": ("Re-save the old checkpoint with this torch's torch.distributed.checkpoint (its metadata "
                           "then holds only what DCP writes), or, if you trust where it came from, set "
                           "checkpoint.roundtrip.compat_trusted = true."),
    }
    Params = Params
    timeout_s = 600.0
    levels = {
        "quick": {"skip": "it writes and reads 256 MB per format three times and kills and resumes a "
                          "training run, a minute or more"},
        "thorough": {"timeout": 1800, "size_mb": 2048.0, "repeats": 5, "tf_size_mb": 256.0},
    }

    def collect(self, ctx: NodeContext, params: Params) -> dict[str, Any]:
        torch_version = _framework_version("torch", ("torch",))
        tf_version = _framework_version("tensorflow", ("tensorflow", "tensorflow-cpu", "tf-nightly",
                                                       "tensorflow-macos"))
        directory = str(params.dir) if params.dir else str(ctx.scratch_dir)
        facts: dict[str, Any] = {
            "dir": directory,
            "dir_is_scratch": not params.dir,
            "frameworks": {"torch": torch_version, "tensorflow": tf_version},
            "size_mb": params.size_mb,
        }
        if torch_version is None and tf_version is None:
            return facts
        if torch_version is not None and params.compat_path:
            facts["compat"] = compat_test(params.compat_path, Path(ctx.scratch_dir), params.compat_trusted)

        problem = self._storage_precheck(directory)
        if problem:
            facts["storage_error"] = problem
            return facts
        facts["fs_type"] = filesystem_type(directory)
        try:
            workdir = Path(tempfile.mkdtemp(prefix="preflight-checkpoint-", dir=directory))
        except OSError as exc:
            kind = storage_problem_kind(exc) or "other"
            facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory) if kind != "other"
                                      else f"cannot create a directory in {directory}: {exc.strerror or exc}"}
            return facts
        try:
            self._measure(ctx, params, facts, workdir, torch_version, tf_version)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            facts["left_behind"] = [str(workdir)] if workdir.exists() else []
        return facts

    @staticmethod
    def _storage_precheck(directory: str) -> dict[str, Any] | None:
        if not os.path.exists(directory):
            return {"kind": "missing", "message": storage_message("missing", directory)}
        if not os.path.isdir(directory):
            return {"kind": "not_a_directory", "message": storage_message("not_a_directory", directory)}
        return None

    def _measure(self, ctx: NodeContext, params: Params, facts: dict[str, Any], workdir: Path,
                 torch_version: str | None, tf_version: str | None) -> None:
        directory = facts["dir"]
        needed = int(max(params.size_mb if torch_version else 0,
                         2 * tf_size_mb(params) if tf_version and params.tensorflow else 0) * MB * FREE_SPACE_FACTOR
                     + MB)
        free = free_bytes(directory)
        facts["free_bytes"], facts["needed_bytes"] = free, needed
        if free is not None and free < needed:
            facts["storage_error"] = {"kind": "full", "message": storage_message("full", directory, free, needed)}
            return
        try:
            if torch_version is not None:
                device = pick_device(params.device)
                facts["device"] = device
                check_memory(params.size_mb)
                state = build_state(params.size_mb, params.seed, device)
                tensors, data_bytes = count_tensors(state)
                facts["torch"] = {"tensors": tensors, "tensor_bytes": data_bytes, "formats": {}}
                formats = ["torch.save"] + (["dcp"] if params.dcp else [])
                for fmt in formats:
                    facts["torch"]["formats"][fmt] = roundtrip_format(fmt, state, workdir, params.repeats, device)
                del state
                if params.resume_test:
                    facts["resume"] = resume_test(ctx, workdir / "resume", params, device)
                    kind = storage_kind_from_text(facts["resume"].get("output_tail", ""))
                    if kind:
                        facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory),
                                                  "error": facts["resume"]["error"]}
                        return
        except Exception as exc:
            kind = storage_problem_kind(exc, free_bytes(directory))
            if kind is None:
                raise
            facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory, free_bytes(directory)),
                                      "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            return
        if tf_version is not None and params.tensorflow:
            result = tensorflow_test(ctx, workdir, params)
            kind = storage_kind_from_text(result.get("error", ""), result.get("errno"))
            if kind:
                facts["storage_error"] = {"kind": kind, "message": storage_message(kind, directory),
                                          "error": result["error"]}
            facts["tensorflow"] = result

    def evaluate(self, facts: dict[str, Any], params: Params, expect: Expect) -> Outcome:
        frameworks = facts.get("frameworks", {})
        if not frameworks.get("torch") and not frameworks.get("tensorflow"):
            return outcome_from_findings([self.finding("no-framework", Status.SKIP, "neither torch nor tensorflow is "
                                                       "installed: no checkpoint to write")], passed="")
        findings: list[Finding] = []
        measurements: list[Measurement] = []
        details: list[str] = []

        def found(kind: str, level: Status, message: str, fix: str | None = None) -> None:
            findings.append(self.finding(kind, level, message, fix=fix))

        where = facts.get("dir", "?")
        if facts.get("dir_is_scratch"):
            details.append(f"checkpoints were written to the scratch directory {where}; set checkpoint.dir to "
                           "the shared filesystem training uses to measure that")
            # Stated as a caveat, so that report.md and every other report carry it beside the figures.
            findings.append(self.finding(
                "scratch-dir" + CAVEAT, Status.PASS, f"checkpoints were written to a scratch directory of the "
                f"run ({where}): the figures describe that disk, not the checkpoint filesystem training uses",
                fix=SCRATCH_FIX))
        if facts.get("fs_type"):
            details.append(f"filesystem at {where}: {facts['fs_type']}")

        compat = facts.get("compat")
        if compat:
            self._judge_compat(compat, found, details)

        storage = facts.get("storage_error")
        if storage:
            found("storage-" + storage.get("kind", "other").replace("_", "-"), Status.FAIL, storage["message"])
            return self._outcome(findings, measurements, details + ([storage["error"]] if storage.get("error") else []))

        if facts.get("torch"):
            self._judge_torch(facts, params, found, measurements, details)

        resume = facts.get("resume")
        if resume:
            self._judge_resume(resume, found, measurements, details)

        tf = facts.get("tensorflow")
        if tf:
            self._judge_tensorflow(tf, found, measurements, details)

        if facts.get("left_behind"):
            found("left-behind", Status.WARN, f"could not remove {', '.join(facts['left_behind'])}")
        return self._outcome(findings, measurements, details)

    @staticmethod
    def _judge_compat(compat: dict[str, Any], found: Any, details: list[str]) -> None:
        """The old checkpoint given to load: refused, broken, or described."""
        if compat.get("refused"):
            found("compat-refused", Status.FAIL, f"old checkpoint {compat['path']} was not loaded: {compat['error']}")
        elif compat.get("error"):
            found("compat-broken", Status.FAIL, f"old checkpoint {compat['path']} does not load: {compat['error']}")
        else:
            details.append(
                f"old checkpoint {compat['path']} ({compat.get('format')}) loads: {compat.get('tensors')} tensors, "
                f"{compat.get('tensor_bytes', 0) / MB:.1f} MB, dtypes {', '.join(compat.get('dtypes', [])) or 'none'}"
                + (f", keys {', '.join(compat['top_level_keys'])}" if compat.get("top_level_keys") else ""))

    @staticmethod
    def _judge_torch(facts: dict[str, Any], params: Params, found: Any, measurements: list[Measurement],
                     details: list[str]) -> None:
        """Each torch format's round trip: exact or not, its write and read rates against the floors."""
        torch_facts = facts["torch"]
        details.append(f"torch state: {torch_facts['tensors']} tensors, {torch_facts['tensor_bytes'] / MB:.1f} MB "
                       f"on {facts.get('device', 'cpu')}")
        for fmt, result in torch_facts.get("formats", {}).items():
            label = "torch.save" if fmt == "torch.save" else "torch.distributed.checkpoint"
            at = FORMAT_LABELS.get(fmt, fmt)
            if result["mismatches"]:
                found("not-exact", Status.FAIL, f"{label} round trip is not exact: {result['mismatches'][0]}")
                details.extend(f"{label}: {m}" for m in result["mismatches"])
            write = measure(f"{label} write", round(statistics.median(result["write_gbps_samples"]), 3), "GB/s",
                            at_least=params.min_write_gbps, param="min_write_gbps", samples=[round(s, 3) for s in result["write_gbps_samples"]],
                            figure=FIGURE_RATE, series="write", at=at)
            read = measure(f"{label} read", round(statistics.median(result["read_gbps_samples"]), 3), "GB/s",
                           at_least=params.min_read_gbps, param="min_read_gbps", samples=[round(s, 3) for s in result["read_gbps_samples"]],
                           figure=FIGURE_RATE, series="read", at=at)
            measurements += [write, read]
            # torch.distributed.checkpoint already saves and loads by shard: its fix cannot be itself.
            if not write.ok:
                found("slow-write", Status.WARN,
                      f"{label} writes at {write.value} GB/s, below {params.min_write_gbps} GB/s",
                      DCP_SLOW_WRITE_FIX if fmt == "dcp" else None)
            if not read.ok:
                found("slow-read", Status.WARN,
                      f"{label} reads at {read.value} GB/s, below {params.min_read_gbps} GB/s",
                      DCP_SLOW_READ_FIX if fmt == "dcp" else None)
            if not result.get("cache_dropped"):
                details.append(f"{label}: the page cache could not be dropped before reading; the read figure "
                               "may be memory speed")
        if facts.get("fs_type") == "tmpfs":
            details.append("the directory is on tmpfs (memory): read and write figures are memory speed")

    @staticmethod
    def _judge_tensorflow(tf: dict[str, Any], found: Any, measurements: list[Measurement], details: list[str]) -> None:
        """The tensorflow round trip: failed, not exact, a stale latest checkpoint, and its rates."""
        if tf.get("error"):
            status = Status.ERROR if tf.get("timed_out") else Status.FAIL
            found("tensorflow-failed", status, f"tensorflow checkpoint round trip failed: {tf['error']}")
            if tf.get("output_tail"):
                details.append(tf["output_tail"])
        else:
            if tf.get("mismatches"):
                found("tensorflow-not-exact", Status.FAIL, f"tensorflow restore is not exact: {tf['mismatches'][0]}")
            if tf.get("manager_latest") != tf.get("latest_checkpoint"):
                found("tensorflow-stale-latest", Status.FAIL,
                      f"CheckpointManager's latest is {tf.get('manager_latest')}, not the checkpoint just saved "
                      f"({tf.get('latest_checkpoint')})")
            measurements.append(measure("tensorflow checkpoint write", round(tf.get("write_gbps", 0.0), 3), "GB/s",
                                        figure=FIGURE_RATE, series="write", at=FORMAT_LABELS["tensorflow"]))
            measurements.append(measure("tensorflow checkpoint read", round(tf.get("read_gbps", 0.0), 3), "GB/s",
                                        figure=FIGURE_RATE, series="read", at=FORMAT_LABELS["tensorflow"]))
            details.append(f"tensorflow {tf.get('tensorflow')}: {tf.get('variables')} variables, "
                           f"{tf.get('state_bytes', 0) / MB:.1f} MB, restored with assert_consumed()"
                           + ("" if tf.get("mismatches") else ", equal bit for bit"))

    @staticmethod
    def _judge_resume(resume: dict[str, Any], found: Any, measurements: list[Measurement], details: list[str]) -> None:
        if resume.get("error"):
            found("resume-error", Status.ERROR, f"resume test could not run: {resume['error']}")
            if resume.get("output_tail"):
                details.append(resume["output_tail"])
            return
        resumed_from = resume.get("resumed_from_step")
        measurements.append(measure("resumed weights equal uninterrupted run", "yes" if resume["exact"] else "no",
                                    equals="yes"))
        if not resumed_from:
            found("resume-no-checkpoint", Status.FAIL,
                  "the resumed run found no checkpoint to resume from after the kill")
        elif not resume["exact"]:
            first = (resume["parameter_mismatches"] or resume["optimizer_mismatches"])[0]
            diff = resume.get("max_abs_difference")
            found("resume-not-exact", Status.FAIL,
                  f"a run killed after step {resume['kill_after_step']} and resumed from step {resumed_from} does not "
                  f"end with the weights of an uninterrupted run ({first}"
                  + (f", largest difference {diff:.3g}" if diff else "") + "): the checkpoint misses state, such as "
                  "random-number states")
            details.extend(f"resume: {m}" for m in resume["parameter_mismatches"] + resume["optimizer_mismatches"])
        else:
            details.append(f"resume: killed (SIGKILL) after step {resume['kill_after_step']}, resumed from the "
                           f"step-{resumed_from} checkpoint, {resume['parameters_compared']} parameter tensors "
                           f"equal bit for bit after {resume['steps']} steps on {resume['device']}")
        if resume.get("drop_rng_state"):
            details.append("fault injection: the training run dropped its random-number states")

    @staticmethod
    def _outcome(findings: list[Finding], measurements: list[Measurement], details: list[str]) -> Outcome:
        parts = [f"{m.name} {m.value} {m.unit}" for m in measurements
                 if m.unit == "GB/s" and (m.name.startswith("torch.save") or m.name.endswith("write"))]
        exact = "round trips exact"
        if any(m.name.startswith("resumed") for m in measurements):
            exact += ", killed run resumes exactly"
        passed = f"{exact}; " + ", ".join(parts) if parts else exact
        return outcome_from_findings(findings, measurements, passed=passed, notes=details)
