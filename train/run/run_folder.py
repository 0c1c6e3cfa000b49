"""Who owns an output folder: one run at a time, and a run deletes only what it wrote itself.

`claim` (the main process, from `start_run`) checks the folder, takes its `.lock`, starts `run.json` and returns the
`Run`, whose manifest (`Run.record`) lists every file the run writes; what a later run may delete or resume into is
decided by that manifest alone. The other commands own their output the same way: a folder (`check_writer_output`,
then `staged_output` or `output_in_place`) or a JSON file (`check_writer_file`, `write_output_json`).
docs/training.md ("Run folders"), docs/reliability.md ("What a command may write").
"""

from __future__ import annotations

import atexit
import datetime
import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from accelerate.utils import set_seed

from train.data.files import pattern_files
from train.data.staging import process_alive, staged
from train.data.tokenization import cache_folder
from train.run import distributed, strict_json
from train.run.checkpoints import CHECKPOINT_PREFIX, DELETING, OLD, TMP, resume_path, verify_checkpoint
from train.run.recipes import Recipe, RecipeError
from train.run.run_log import read_jsonl

RECORD, LOCK, OUTPUT_RECORD = "run.json", ".lock", ".lineage-output.json"
RUN_FILES = ("checkpoints", "logs", "tokenizer", "model", "adapter", "loss_curve.png")  # what a run writes
WORK = ("checkpoints", "logs", "model", "adapter")  # a run that left none (logs: of a step) never trained (`_trained`)
KEPT = ("checkpoints", "model", "adapter")  # a run that wrote one of these can be resumed or is published
APPENDED = ("logs",)  # written to as the run goes: recorded by size, which only grows
_SAMPLE = 1 << 20  # bytes hashed from each end of a file: a fingerprint, not a full read of a multi-GB checkpoint
ASIDE = ".overwritten-"  # + the claiming process's id: an earlier run's files, kept until the new run writes
STOPPED = "a run that stopped before training (no checkpoint, logged step or model)"  # why its files are deleted


class OutputDirError(RuntimeError):
    """An output folder that this run may not write into."""


def recipe_hash(recipe) -> str:
    return hashlib.sha256(yaml.safe_dump(recipe.training_dict(), sort_keys=True).encode()).hexdigest()[:16]


def run_inputs(recipe) -> dict[str, str]:
    """The recipe keys naming local paths that the run reads, a translation pair's files by their prefix
    (`Recipe.pair_files`), a glob pattern that matches files as it is: they must lie outside its output folder."""
    keys = ("tokenizer", "model", "train_file", "validation_file", "dataset")
    pairs = {recipe.data_source(split) for split in ("train", "validation") if recipe.pair_files(split)}
    return {key: value for key in keys
            if (value := getattr(recipe, key)) and (Path(value).exists() or value in pairs or pattern_files(value))}


def _check_path(value: str, argument: str) -> Path:
    """`value` resolved, unless it is empty, a file (or below one) or the working folder."""
    if not str(value).strip():
        raise OutputDirError(f"{argument} is empty: give a folder for the run's files (it is created when missing), "
                             f"e.g. outputs/run")
    _check_parents(Path(value), argument)
    folder = Path(value).resolve()
    cache = cache_folder().resolve()
    if folder == cache or cache in folder.parents:
        raise OutputDirError(f"{argument} {folder} lies inside the Lineage cache {cache} (LINEAGE_CACHE, else "
                             f"~/.cache/lineage), whose stores and staging folders later runs replace and sweep: give "
                             f"a folder outside it")
    if folder == Path.cwd().resolve():
        raise OutputDirError(f"{argument} is the working folder {folder}: the output is written into subfolders and "
                             f"files of it; give a folder of its own, e.g. outputs/run")
    return folder


def _check_parents(folder: Path, argument: str) -> None:
    """Refuse a `folder` that is a file or lies below one, or whose nearest existing folder this user cannot write."""
    for candidate in (folder, *folder.parents):
        if candidate.exists() and not candidate.is_dir():
            raise OutputDirError(f"{argument}: {candidate} is a file, not a folder; give a folder path (it is created "
                                 f"when missing)")
    existing = next(p for p in (folder.resolve(), *folder.resolve().parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputDirError(f"{argument}: {existing} is not writable by this user, so nothing could be saved "
                             f"there; give a folder you can write to")


def check_output_dir(value: str, inputs: dict[str, str] | None = None,
                     argument: str = "recipe key 'output_dir'") -> Path:
    """The resolved run folder, or an `OutputDirError` naming why the run may not write there; writes nothing."""
    folder = _check_path(value, argument)
    named: list[tuple[str, str]] = []
    for key, path in (inputs or {}).items():  # a pattern's inputs are the files it matches
        matched = pattern_files(path)
        named += ([(f"recipe key {key!r}", path)] if matched is None
                  else [(f"recipe key {key!r}, pattern {path}", str(file)) for file in matched])
    _check_apart(folder, named, argument, "this run")
    if (folder / "config.json").is_file():
        raise OutputDirError(f"{argument} {folder} is a saved model folder (it holds config.json); a run publishes its "
                             f"own model into <output_dir>/model and never writes over a model: choose a new folder")
    return folder


def _check_apart(folder: Path, inputs: Iterable[tuple[str, str]], argument: str, reader: str) -> None:
    """Refuse a `folder` that is, holds or lies in one of `inputs` ((how `reader` names the input, its path))."""
    for name, path in inputs:
        resolved = Path(path).resolve()
        if resolved == folder or folder in resolved.parents or resolved in folder.parents:
            where = "is" if resolved == folder else "holds" if folder in resolved.parents else "lies in"
            raise OutputDirError(f"{argument} {folder} {where} an input of {reader} ({name}: {path}); the output "
                                 f"folder must lie outside every input, so that nothing {reader} reads is ever "
                                 f"replaced, deleted or added to: choose another folder")


# ----------------------------------------------------------------------------- manifests

def _fingerprint(path: Path) -> list:
    """[size, hash of the first and last `_SAMPLE` bytes]: what a manifest records of a file."""
    size, digest = path.stat().st_size, hashlib.sha256()
    with open(path, "rb") as handle:
        digest.update(handle.read(_SAMPLE))
        if size > _SAMPLE:
            handle.seek(max(_SAMPLE, size - _SAMPLE))
            digest.update(handle.read())
    return [size, digest.hexdigest()[:16]]


def _listing(folder: Path, name: str) -> dict[str, list]:
    """Every file at or under `folder/name`, by its path relative to `folder`, with its fingerprint (its size alone
    for `APPENDED` parts and checkpoint files)."""
    root = folder / name
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    listing = {}
    for path in paths:
        relative = path.relative_to(folder).as_posix()
        by_size = name in APPENDED or _checkpoint_file(relative)
        listing[relative] = [path.stat().st_size] if by_size else _fingerprint(path)
    return listing


def _under(relative: str, name: str) -> bool:
    return relative == name or relative.startswith(name + "/")


def _unchanged(folder: Path, name: str, wrote: dict[str, list]) -> bool:
    """Whether `folder/name` holds only files that `wrote` records, each as recorded (an `APPENDED` one may have
    grown), or checkpoint files (`_checkpoint_file`); recorded files may have gone."""
    for relative, now in _listing(folder, name).items():
        before = wrote.get(relative)
        if _checkpoint_file(relative):
            continue
        if before is None or (now[0] < before[0] if name in APPENDED else now != before):
            return False
    return True


def _checkpoint_file(relative: str) -> bool:
    """A file inside a folder that a checkpoint save names (`step-N`, or its `.tmp-` / `.old-` / `.del-` stages):
    the run's own even when a kill came between the write and its record."""
    parts = relative.split("/")
    return (len(parts) > 2 and parts[0] == "checkpoints"
            and parts[1].startswith((CHECKPOINT_PREFIX, TMP, OLD, DELETING)))


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict) -> None:
    """Write `data` to `path` through a temporary file and a rename: a reader never sees half a record."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(strict_json.dumps(data, indent=1))
    os.replace(tmp, path)


def _delete(path: Path, why: str) -> None:
    print(f"{why}: deleting {path}", flush=True)
    shutil.rmtree(path) if path.is_dir() else path.unlink()


# ----------------------------------------------------------------------------- runs

@dataclass(eq=False)
class Run:
    """A training run's hold on its output folder (`claim`; the other processes `join` it and own nothing).
    `resume_from`: the verified checkpoint the run resumes (None: a new run). Only the owner writes."""

    recipe: Any
    folder: Path
    owner: bool = False
    resume_from: Path | None = None
    fresh: bool | None = False  # the claim wrote a new record into an existing folder (True) or a new folder (None)
    aside: Path | None = None  # an earlier run's files set aside by the claim, until this run has a checkpoint
    held: bool = False  # the owner holds the lock

    def record(self, *names: str) -> None:
        """Record in the manifest every file now at or under `<folder>/<name>` (parts of `RUN_FILES`)."""
        if self.owner and _kept(record_files(self.folder, *names)):
            self._drop_aside()

    def note_resume(self, step: int, changed: dict) -> None:
        """Add the accepted resume (its checkpoint, step, command and the recipe keys changed since:
        {key: [before, now]}) to the record."""
        if not self.owner:
            return
        record = _read_json(self.folder / RECORD) or {}
        record.setdefault("resumes", []).append({"checkpoint": str(self.resume_from), "step": step, "changed": changed,
                                                 "time": _now(), "pid": os.getpid(), "command": command_line()})
        _write_json(self.folder / RECORD, record)

    def withdraw(self) -> None:
        """Undo the claim of a new run that stopped before it trained (`_trained`): what it wrote, its record, lock and
        (if the claim created it) folder go, and an earlier run's set-aside files come back; a resumed run's stay."""
        if not self.held:
            return
        if self.aside is not None:  # still set aside: no checkpoint yet
            _undo(self.folder, self.aside)
            self.aside = None
            self.release()
            return
        record = _read_json(self.folder / RECORD) or {}
        present = [name for name in RUN_FILES if (self.folder / name).exists()]  # this run's: the claim saw to it
        if self.fresh is False or record.get("resumes") or _trained(self.folder, present):
            return
        for name in present:
            _delete(self.folder / name, STOPPED)
        (self.folder / RECORD).unlink(missing_ok=True)
        self.release()
        if self.fresh is None and not any(self.folder.iterdir()):
            self.folder.rmdir()

    def release(self) -> None:
        """Give the folder's lock back (the run has published its model)."""
        if self.held:
            self._drop_aside()
            self.held = False
            _release_lock(self.folder)

    def _drop_aside(self) -> None:
        """The run has a checkpoint (or has published): the earlier run's files its claim set aside are deleted."""
        if self.aside is not None and self.aside.exists():
            _delete(self.aside, "overwrite_output_dir")
        self.aside = None


def claim(recipe) -> Run:
    """Check `recipe.output_dir`, take its lock, start the run record and decide the resume (`join`). A refusal
    deletes nothing and leaves no file behind."""
    folder = check_output_dir(recipe.output_dir, run_inputs(recipe))
    existed = folder.is_dir()
    _take_lock(folder)
    try:
        _recover_set_aside(folder)
        record = _read_json(folder / RECORD) if existed else None
        aside = None
        if recipe.resume_from_checkpoint:
            if record is None:
                _write_record(folder, recipe)  # a folder without a record: the resume starts one
            else:
                _refuse_foreign(folder, record)  # a resume must not adopt files it did not write
        else:
            aside = _clear_for_new_run(folder, record, recipe.overwrite_output_dir)
            _write_record(folder, recipe)
    except BaseException:
        _release_lock(folder)
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    fresh = None if not existed else record is None or not recipe.resume_from_checkpoint
    run = Run(recipe, folder, owner=True, fresh=fresh, aside=aside, held=True)
    try:
        run.resume_from = join(recipe).resume_from
    except BaseException:
        run.withdraw()
        raise
    return run


def join(recipe) -> Run:
    """The run of `recipe` as a process that does not own its folder sees it, after the owner's `claim`."""
    folder = Path(recipe.output_dir).resolve()
    return Run(recipe, folder, resume_from=resume_path(recipe.resume_from_checkpoint, folder / "checkpoints"))


def check_steps_left(run: Run) -> None:
    """Refuse a resume that would train nothing: its checkpoint is past `max_steps`, or at it with the model published
    from that step. One at `max_steps` whose run stopped before publishing resumes to finish."""
    recipe, path, output = run.recipe, run.resume_from, run.folder
    if path is None or recipe.max_steps <= 0:
        return
    step = verify_checkpoint(path)["state"]["step"]
    try:
        published = json.loads((output / "model" / "results.json").read_text()).get("steps")
    except (OSError, ValueError, AttributeError):
        published = None
    if step > recipe.max_steps or step == recipe.max_steps == published:
        done = f"; the run's model (step {published}) is in {output / 'model'}" if published is not None else ""
        raise RecipeError(f"recipe key 'max_steps' is {recipe.max_steps} but checkpoint {path} is at step {step}: "
                          f"already past max_steps, so the resume would train nothing{done}; set max_steps above "
                          f"{step} to train on")


@contextmanager
def start_run(recipe: Recipe) -> Iterator[Run]:
    """Start a run of `recipe` and yield its `Run`: Accelerate's process-wide state is reset (a process may run
    several runs), the main process `claim`s the folder before the others `join` it, every process is seeded, and a
    resume with nothing left to train is refused. A new run stopped inside the block before it trained withdraws its
    claim (`Run.withdraw`), leaving the folder as it was."""
    distributed.forget_accelerate_state()
    distributed.check_launch()
    with distributed.one_process_first() as main:
        run = claim(recipe) if main else join(recipe)
    set_seed(recipe.seed)  # python, numpy and torch: every process builds the same weights
    try:
        check_steps_left(run)
        yield run
    except BaseException:
        run.withdraw()
        raise


def _refuse_foreign(folder: Path, record: dict | None) -> list[str]:
    """The paths of `RUN_FILES` present in `folder`, or an `OutputDirError` naming those the manifest does not
    account for."""
    present = [name for name in RUN_FILES if (folder / name).exists()]
    wrote = (record or {}).get("wrote")
    wrote = wrote if isinstance(wrote, dict) else None
    foreign = [name for name in present if wrote is None or not _unchanged(folder, name, wrote)]
    if (folder / RECORD).exists() and wrote is None:
        foreign.insert(0, RECORD)  # another program's run.json, or one from before records listed their files
    if foreign:
        raise OutputDirError(
            f"output_dir {folder} holds {', '.join(foreign)}, which no Lineage run recorded writing there (or which "
            f"changed since): a run writes these paths itself and deletes only files its own record lists; move "
            f"them away or choose another --output_dir")
    return present


def _clear_for_new_run(folder: Path, record: dict | None, overwrite: bool) -> Path | None:
    """Delete what an earlier run recorded writing here, when it may be, or set it aside (returns where:
    `overwrite`); refuse otherwise."""
    present = _refuse_foreign(folder, record)
    worked = _trained(folder, present)
    if worked and not overwrite:
        raise OutputDirError(
            f"output_dir {folder} holds another run's files ({', '.join([RECORD, *present])}); to continue that run "
            f"pass --resume_from_checkpoint latest, to delete its files and start over pass --overwrite_output_dir "
            f"true, or choose another --output_dir")
    if worked:  # deleted once the new run has a checkpoint, put back if it stops first
        aside = _set_aside(folder, [RECORD, *present])
        print(f"overwrite_output_dir: set aside {', '.join(present)} of {folder} in {aside.name}, deleted once this "
              f"run writes its first checkpoint or its model, put back if it stops before (if it is killed first, by "
              f"the next run into {folder})", flush=True)
        return aside
    for name in present:  # a run killed before it trained (one that stopped withdrew its files itself)
        _delete(folder / name, STOPPED)
    return None


def _trained(folder: Path, present: list[str]) -> list[str]:
    """Those of `present` (parts of `RUN_FILES` in `folder`) that show a run trained: its checkpoints, model, adapter
    or a log of a step (a run that failed in its first step logged only its launch)."""
    return [name for name in present if name in WORK and (name != "logs" or _logged_a_step(folder))]


def _logged_a_step(folder: Path) -> bool:
    """Whether the run's log holds a record past its launch (step 0): a run that failed in its first step logged
    only how it was launched."""
    return any(entry.get("step", 0) > 0 for entry in read_jsonl(folder / "logs" / "metrics.jsonl"))


def _kept(record: dict) -> bool:
    """Whether a run's manifest lists a checkpoint, model or adapter: then an earlier run's set-aside files go."""
    return any(_under(path, name) for path in record.get("wrote", {}) for name in KEPT)


def _set_aside(folder: Path, names: list[str]) -> Path:
    """Move `names` of `folder` into `<folder>/.overwritten-<pid>` (`_put_back` undoes it); returns that folder."""
    aside = folder / f"{ASIDE}{os.getpid()}"
    aside.mkdir()
    for name in names:
        if (folder / name).exists():
            (folder / name).rename(aside / name)
    return aside


def _put_back(folder: Path, aside: Path, ours: list[Path], why: str) -> None:
    """Delete `ours` (what a stopped run wrote in `folder`), then move the files `_set_aside` kept back."""
    for path in ours:
        if path.exists():
            _delete(path, why)
    for path in aside.iterdir():
        path.rename(folder / path.name)
    aside.rmdir()


def _undo(folder: Path, aside: Path) -> None:
    """Delete what a run that never wrote a checkpoint or model wrote, and its record, and put back the earlier
    run's files."""
    wrote = (_read_json(folder / RECORD) or {}).get("wrote", {})
    ours = [folder / name for name in RUN_FILES if (aside / name).exists() or any(_under(p, name) for p in wrote)]
    _put_back(folder, aside, [*ours, folder / RECORD], "a run stopped before its first checkpoint")
    print(f"output_dir {folder}: put back the earlier run's files, as the overwriting run stopped before its first "
          f"checkpoint", flush=True)


def _dead_set_aside(folder: Path) -> list[Path]:
    """The folders of files set aside in `folder` by claims whose process is gone."""
    return [aside for aside in folder.glob(f"{ASIDE}*")
            if aside.name.removeprefix(ASIDE).isdigit() and not process_alive(int(aside.name.removeprefix(ASIDE)))]


def _recover_set_aside(folder: Path) -> None:
    """Files set aside by a claim whose process is gone: put back, or deleted when that run had written a
    checkpoint or its model."""
    for aside in _dead_set_aside(folder):
        if _kept(_read_json(folder / RECORD) or {}):
            _delete(aside, "an earlier run's files set aside by an overwriting run that has a checkpoint since")
        else:
            _undo(folder, aside)


def record_files(folder: Path, *names: str) -> dict:
    """Record in `folder`'s run manifest every file now at or under `folder/<name>` (parts of `RUN_FILES`),
    replacing what was recorded for them; returns the record."""
    record = _read_json(folder / RECORD) or {}
    wrote = {k: v for k, v in record.get("wrote", {}).items() if not any(_under(k, name) for name in names)}
    for name in names:
        if (folder / name).exists():
            wrote.update(_listing(folder, name))
    record["wrote"] = dict(sorted(wrote.items()))
    _write_json(folder / RECORD, record)
    return record


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def command_line() -> str:
    """The command line that started this process, as a shell runs it again: `lineage <command> ...`,
    `<python> -m train.<module> ...`, else the interpreter and its arguments."""
    program = Path(sys.argv[0])
    if sys.argv[0].startswith("lineage "):
        words = ["lineage", *sys.argv[1:]]
    elif sys.argv[0].startswith("python -m "):  # as `train.cli.run_script` names it
        words = [sys.executable, "-m", sys.argv[0].split()[-1], *sys.argv[1:]]
    elif program.parent.name == "train" and (program.parent / "__init__.py").is_file():
        words = [sys.executable, "-m", f"train.{program.stem}", *sys.argv[1:]]
    else:
        words = [sys.executable, *sys.argv]
    return shlex.join(words)


def command_of(command: str, argv: Sequence[str] | None) -> str:
    """How `lineage <command>` was run: `command_line`, or with `argv` where called from Python."""
    return command_line() if argv is None else shlex.join(["lineage", command, *argv])


def _write_record(folder: Path, recipe) -> None:
    inputs = {key: str(Path(value).resolve()) for key, value in run_inputs(recipe).items()}
    _write_json(folder / RECORD, {"recipe_sha256": recipe_hash(recipe), "started": _now(), "pid": os.getpid(),
                                  "host": socket.gethostname(), "command": command_line(), "cwd": os.getcwd(),
                                  "inputs": inputs,
                                  "resumes": [], "wrote": {}})


# ----------------------------------------------------------------------------- other commands' folders

def check_writer_output(value: str, command: str, argument: str = "--output_dir", overwrite: bool = False, *,
                        inputs: dict[str, str] | None = None) -> Path:
    """The resolved folder that `command` may write: apart from its `inputs` ({argument naming one: path}), new,
    empty, or (with `overwrite`) holding only what its own manifest records, unchanged; else an `OutputDirError`."""
    folder = _check_path(value, argument)
    _check_apart(folder, (inputs or {}).items(), argument, f"lineage {command}")
    if not folder.is_dir():
        return folder
    _recover_in_place(folder, command)
    if not any(folder.iterdir()):
        return folder
    own = _read_json(folder / OUTPUT_RECORD) or {}
    wrote = own.get("wrote") if own.get("command") == command else None
    others = [p.name for p in sorted(folder.iterdir())
              if p.name != OUTPUT_RECORD and (wrote is None or not _unchanged(folder, p.name, wrote))]
    if wrote is None or others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        killed = (f" (a run of {command}, process {own.get('pid')}, was stopped there before it recorded its output: "
                  f"delete what it left)") if own.get("command") == command and wrote is None else ""
        raise OutputDirError(
            f"{argument} {folder} is not empty and holds {shown}, which {command} did not write there (or which "
            f"changed since){killed}: {command} writes into a new or empty folder, or replaces its own earlier output; "
            f"choose another folder")
    if not overwrite:
        raise OutputDirError(f"{argument} {folder} holds an earlier output of {command}; pass --overwrite_output_dir "
                             f"to replace it, or choose another folder")
    return folder


@contextmanager
def output_in_place(folder: Path, command: str) -> Iterator[Path]:
    """`folder` (checked by `check_writer_output`) for a command whose output holds runs and is written in place (the
    experiment, the main job), its earlier output set aside in `<folder>/.overwritten-<pid>`: deleted when the block
    completes, put back when it raises (what it wrote is then deleted) or after a kill."""
    folder.mkdir(parents=True, exist_ok=True)
    earlier = sorted(p.name for p in folder.iterdir())
    if earlier:
        aside = _set_aside(folder, earlier)
        print(f"{command}: set aside its earlier output in {aside}, deleted once this one is written, put back if it "
              f"stops before (if it is killed first, by the next {command} into {folder})", flush=True)
    _write_json(folder / OUTPUT_RECORD, {"command": command, "pid": os.getpid()})  # no manifest: not finished
    try:
        yield folder
    except BaseException:
        if earlier:
            _restore_output(folder, aside, command)
        else:
            _record_output(folder, command, finished=False)
        raise
    _record_output(folder, command)
    if earlier:
        _delete(aside, f"{command}: its earlier output, now replaced")


def _record_output(folder: Path, command: str, finished: bool = True) -> None:
    names = [p.name for p in folder.iterdir() if p.name not in (OUTPUT_RECORD, LOCK) and not p.name.startswith(ASIDE)]
    wrote = {k: v for name in names for k, v in _listing(folder, name).items() if not k.endswith("/" + LOCK)}
    _write_json(folder / OUTPUT_RECORD, {"command": command, "finished": finished, "wrote": wrote})


def _restore_output(folder: Path, aside: Path, command: str) -> None:
    """Delete what a run of `command` wrote in `folder` (all but `aside`) and put the earlier output back."""
    ours = [path for path in sorted(folder.iterdir()) if path != aside]
    _put_back(folder, aside, ours, f"{command} stopped before it finished")
    print(f"{command}: put back its earlier output in {folder}", flush=True)


def _recover_in_place(folder: Path, command: str) -> None:
    """The earlier output of `command` set aside in `folder` by a run of it that was killed: put back."""
    own = _read_json(folder / OUTPUT_RECORD) or {}
    for aside in _dead_set_aside(folder):
        if own.get("command") == command and "wrote" not in own and aside.name == f"{ASIDE}{own.get('pid')}":
            _restore_output(folder, aside, command)


def check_writer_file(value: str, command: str, argument: str = "--json", overwrite: bool = False) -> Path:
    """The resolved file that `command` may write (`write_output_json`): new, or (with `overwrite`) a JSON file
    that names `command` as its writer; else an `OutputDirError`; writes nothing."""
    path = Path(value)
    if path.is_dir():
        raise OutputDirError(f"{argument} {path} is a folder; give the path of a file to write, e.g. results.json")
    _check_parents(path.parent, argument)
    if not path.exists():
        return path.resolve()
    if (_read_json(path) or {}).get("written_by") != f"lineage {command}":
        raise OutputDirError(f"{argument} {path} exists and is no earlier output of lineage {command} (its JSON names "
                             f"its writer in 'written_by'): choose another file")
    if not overwrite:
        raise OutputDirError(f"{argument} {path} holds an earlier output of lineage {command}; pass "
                             f"--overwrite_{argument.removeprefix('--')} to replace it, or choose another file")
    return path.resolve()


def write_output_json(path: Path, command: str, data: dict) -> None:
    """`data` written to `path` (checked by `check_writer_file`) with `written_by`, through a temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json(path, {"written_by": f"lineage {command}", **data})


@contextmanager
def staged_output(folder: Path, command: str | None = None) -> Iterator[Path]:
    """A temporary folder beside `folder` to write into, recorded as `command`'s output (None: a run's part) and
    moved into place when the block completes; removed, `folder` unchanged, when it raises."""
    with staged(folder) as staging:
        yield staging
        if command is not None:
            wrote = {k: v for p in staging.iterdir() for k, v in _listing(staging, p.name).items()}
            _write_json(staging / OUTPUT_RECORD, {"command": command, "wrote": wrote})


def _take_lock(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": _now()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = json.loads(lock.read_text())
            except (ValueError, OSError):
                holder = {}
            pid, host = holder.get("pid"), holder.get("host")
            if pid == os.getpid() and host == mine["host"]:
                return  # this process's own (an earlier run in it that raised)
            if host == mine["host"] and isinstance(pid, int) and not process_alive(pid):
                print(f"output_dir {folder}: removing the stale lock of process {pid}, which no longer runs",
                      flush=True)
                lock.unlink(missing_ok=True)
                continue
            raise OutputDirError(
                f"output_dir {folder} is in use by another run (process {pid} on {host}, since "
                f"{holder.get('started')}): two runs in one folder overwrite each other's checkpoints and log; wait "
                f"for it, choose another --output_dir, or delete {lock} if that run is gone") from None
        with os.fdopen(fd, "w") as f:
            f.write(strict_json.dumps(mine))
        atexit.register(_release_lock, folder)
        return


def _release_lock(folder: Path) -> None:
    lock = folder / LOCK
    try:
        holder = json.loads(lock.read_text())
    except (ValueError, OSError):
        return
    if holder.get("pid") == os.getpid():
        lock.unlink(missing_ok=True)


__all__ = ["LOCK", "OUTPUT_RECORD", "OutputDirError", "RECORD", "RUN_FILES", "Run", "check_output_dir",
           "check_writer_file", "check_writer_output", "claim", "command_line", "command_of", "join",
           "output_in_place", "recipe_hash", "record_files", "run_inputs", "staged_output", "write_output_json"]
