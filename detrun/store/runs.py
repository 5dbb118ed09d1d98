"""The one Arrow schema, atomic Parquet writes, run manifests, and tensor blobs by digest.

Layout under the runs root (a local path or any pyarrow.fs URI, e.g. s3://bucket/runs):
  <run_id>/manifest.json              the spec it ran, GPU slots, status, created and finished, the driver's
                                      heartbeat, failures, resumptions, the driver's timings
  <run_id>/rows/part-<shard>.parquet  one file per shard, written whole; a retried or resumed shard replaces
                                      its file. Its digest columns are the run's references to blobs
  <run_id>/timings/<shard>.json       where the shard's seconds went (stages.py); compare never reads it
  blobs/<digest[:2]>/<digest>.bin     raw bytes of a tensor, one copy per digest for every run
  <run_id>/blobs/<digest>.bin         the same, in runs written before blobs were shared (still read)
  baselines/<spec>/<fingerprint>.json the golden run of one environment fingerprint (judge/baseline.py)
  jit-cache/<flashinfer>/<cuda>/<arch>/<module>.tar  FlashInfer's compiled modules (run/jitcache.py)
  .submissions/<run_id>.json          the Ray Jobs API submissions of a run (`submit --address http://...`)
Verdicts and history (judge/compare.py, judge/history.py) are computed from the rows and manifests when
asked; they are not stored.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import posixpath
import re
import uuid
from datetime import datetime, timezone
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Type, Union, cast

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import DetrunError, first_line
from ..paths import check_writable_dir
from ..record.manifest import REQUIRED, Manifest, SubmissionRecord
from ..record.rows import SCHEMA, as_stored, make_row
from ..record.status import RunStatus
from ..signals import held
from .heartbeat import driver_record
from .requests import RunsRequest


def read_part(fs: pafs.FileSystem, path: str, **options) -> pa.Table:
    """One rows file (pq.read_table's options); one that cannot be read is a DetrunError saying so."""
    try:
        return pq.read_table(path, filesystem=fs, **options)
    except (pa.ArrowException, OSError) as exc:
        raise DetrunError(f"{path}: corrupt or truncated Parquet ({exc})") from None


def read_footer(fs: pafs.FileSystem, path: str) -> None:
    """Check one rows file's Parquet footer (its schema and row groups) without reading its rows; one that
    cannot be read is read_part's DetrunError (a truncated file has no footer)."""
    try:
        pq.read_metadata(path, filesystem=fs)
    except (pa.ArrowException, OSError) as exc:
        raise DetrunError(f"{path}: corrupt or truncated Parquet ({exc})") from None


RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
RESERVED = ("blobs", "baselines", "jit-cache")  # folders of the root itself
DIGEST = re.compile(r"[0-9a-f]{8,128}")


def _with(manifest: Manifest, extra: Dict[str, object]) -> Manifest:
    """The manifest with more of its fields; a name that is not one is an error (as make_row's)."""
    unknown = set(extra) - set(Manifest.__annotations__)
    if unknown:
        raise KeyError(f"not a manifest field: {sorted(unknown)}")
    return cast(Manifest, {**manifest, **extra})


def check_run_id(run_id: str, option: str = "run id") -> str:
    """run_id if it is one plain name under the root (no '/', '\\', leading '.'); else DetrunError naming option."""
    if not RUN_ID.fullmatch(run_id):
        raise DetrunError(f"{option} {run_id!r}: a run id must match ^{RUN_ID.pattern}$ "
                          "(one name under the runs root)")
    if run_id in RESERVED:
        raise DetrunError(f"{option} {run_id!r}: the runs root keeps its own {run_id}/ folder; pick another run id")
    return run_id


def new_run_id(name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}-{uuid.uuid4().hex[:4]}"


# Object stores: an object appears whole when its upload completes, and a rename is a copy and a delete.
_OBJECT_STORES = tuple(getattr(pafs, n) for n in ("S3FileSystem", "GcsFileSystem") if hasattr(pafs, n))
_AUTH = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "EXPIRED_TOKEN")


@contextlib.contextmanager
def storage_errors(root: str, kinds: Tuple[Type[BaseException], ...] = (OSError,)):
    """An OSError of the filesystem (S3's "AWS Error ...", a full disk) as one DetrunError naming root."""
    try:
        yield
    except kinds as exc:
        line = re.sub(r"\s*\(Request ID: [^)]*\)", "", first_line(exc, typed=False).strip())
        hint = ("; check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
                if any(code in line for code in _AUTH) else "")
        raise DetrunError(f"runs root {root}: {line}{hint}") from None


def _one_put(uri: str) -> str:
    """An s3:// URI with allow_delayed_open (unless it says otherwise): pyarrow then writes an object of
    less than a part (10 MB) with one PutObject, not a multipart upload of three requests."""
    if not uri.startswith("s3://") or "allow_delayed_open=" in uri:
        return uri
    return uri + ("&" if "?" in uri else "?") + "allow_delayed_open=true"


def _guarded(cls):
    """Every public method of cls runs under storage_errors(self.root)."""

    def guard(fn):
        @functools.wraps(fn)
        def method(self, *args, **kwargs):
            with storage_errors(self.root):
                return fn(self, *args, **kwargs)

        return method

    for name, fn in list(vars(cls).items()):
        if callable(fn) and not name.startswith("_"):
            setattr(cls, name, guard(fn))
    return cls


@_guarded
class RunStore:
    """A runs root: create runs, write shards and blobs atomically, read them back. A storage error
    (wrong credentials, a missing bucket, a full disk) is one DetrunError naming the root."""

    def __init__(self, root: str):
        self.root = root
        with storage_errors(root, (OSError, pa.ArrowInvalid)):  # ArrowInvalid: a URI pyarrow cannot read
            if "://" in root:
                self.fs, self.base = pafs.FileSystem.from_uri(_one_put(root))
            else:
                self.fs, self.base = pafs.LocalFileSystem(), os.path.abspath(root)
            self.local = isinstance(self.fs, pafs.LocalFileSystem)
            self.object_store = isinstance(self.fs, _OBJECT_STORES)
            bucket = self.base.split("/", 1)[0]
            if self.object_store and self.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise DetrunError(f"runs root {root}: bucket {bucket!r} does not exist")

    def check_writable(self, option: str = "--runs-root") -> None:
        """A local root must take new files (DetrunError naming option); a remote one is not checked."""
        if self.local:
            check_writable_dir(self.base, option)

    def _p(self, *parts: str) -> str:
        return posixpath.join(self.base, *parts)

    def where(self, *parts: str) -> str:
        """The root as given, joined with parts (a URI's ?query stays at the end), for messages."""
        head, sep, query = self.root.partition("?")
        return posixpath.join(head, *parts) + sep + query

    def _write_atomic(self, path: str, data: bytes) -> None:
        """Put data at path whole or not at all; the bytes are complete before anything is opened.

        An object store gets one upload to path: the object appears when it completes (a rename there
        would be a copy and a delete, and a crash between them would leave a .tmp- object behind). Ctrl-C
        and SIGTERM wait for it, since a stream closed early, even by an exception, completes the upload.
        A filesystem gets a tmp file renamed over path (atomic), the tmp removed if the write fails.
        """
        if self.object_store:
            with held(), self.fs.open_output_stream(path) as out:
                out.write(data)
            return
        self.fs.create_dir(posixpath.dirname(path), recursive=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            self.fs.move(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.delete_file(tmp)
            raise

    def _exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    # -- files under the root (jit-cache entries), JSON documents (manifests, baselines)
    def put(self, rel_path: str, data: bytes) -> None:
        """Write bytes at rel_path whole or not at all (_write_atomic)."""
        self._write_atomic(self._p(rel_path), data)

    def get(self, rel_path: str) -> bytes:
        with self.fs.open_input_stream(self._p(rel_path)) as f:
            return f.read()

    def write_json(self, rel_path: str, doc: dict) -> None:
        self.put(rel_path, json.dumps(doc, indent=2, sort_keys=True).encode())

    def read_json(self, rel_path: str, what: str = "file") -> Optional[dict]:
        """The document, or None when there is none; unreadable JSON is a DetrunError."""
        path = self._p(rel_path)
        if not self._exists(path):
            return None
        try:
            doc = json.loads(self.get(rel_path))
        except (ValueError, OSError) as exc:
            raise DetrunError(f"{path}: unreadable {what} ({exc})") from None
        if not isinstance(doc, dict):
            raise DetrunError(f"{path}: unreadable {what} (a JSON {type(doc).__name__}, not an object)")
        return doc

    def list_names(self, rel_dir: str, suffix: str, dirs: bool = False) -> List[str]:
        """Base names of the files (or, with dirs, folders) directly in rel_dir ending with suffix."""
        path = self._p(rel_dir)
        if not self._exists(path):
            return []
        kind = pafs.FileType.Directory if dirs else pafs.FileType.File
        infos = self.fs.get_file_info(pafs.FileSelector(path))
        return sorted(i.base_name for i in infos if i.type == kind and i.base_name.endswith(suffix))

    # -- manifests
    def create_run(self, run_id: str, spec: dict, gpus: int, spec_path: str = "", **extra) -> Manifest:
        """Claim run_id and write its manifest; of two creates of one id, one fails (see _claim). extra: more of
        Manifest's fields."""
        self._claim(check_run_id(run_id))
        manifest: Manifest = {
            "run_id": run_id,
            "spec": spec,
            "spec_path": spec_path,
            "gpus": gpus,
            "status": RunStatus.RUNNING,
            "created": datetime.now(timezone.utc).isoformat(),
            "driver": driver_record(),
        }
        manifest = _with(manifest, extra)
        self.write_manifest(manifest)
        return manifest

    def check_new_run(self, run_id: str, option: str = "run id") -> None:
        """A DetrunError naming option when run_id is taken under this root (create_run claims it for good)."""
        if self._exists(self._p(run_id)):
            raise DetrunError(f"{option} {run_id}: {self._taken(run_id)}")

    def _taken(self, run_id: str) -> str:
        return f"run {run_id} already exists under {self.root}"

    def _claim(self, run_id: str) -> None:
        """Make the run's directory: atomic on a local root (os.mkdir); on a URI root (no directories
        to make atomically) it is check-then-write, so two creates of one id may both pass."""
        path, taken = self._p(run_id), DetrunError(self._taken(run_id))
        if not self.local:
            if self._exists(path):
                raise taken
            return
        try:
            os.makedirs(self.base, exist_ok=True)
            os.mkdir(path)
        except FileExistsError:
            raise taken from None
        except OSError as exc:
            raise DetrunError(f"{path}: cannot create the run ({exc.strerror or exc})") from None

    def write_manifest(self, manifest: Manifest) -> None:
        self.write_json(posixpath.join(manifest["run_id"], "manifest.json"), dict(manifest))

    def has_run(self, run_id: str) -> bool:
        return self._exists(self._p(run_id, "manifest.json"))

    def manifest(self, run_id: str) -> Manifest:
        """The run's manifest, its REQUIRED fields checked; none, or one without them, is a DetrunError."""
        path = self._p(run_id, "manifest.json")
        manifest = self.read_json(posixpath.join(run_id, "manifest.json"), "manifest")
        if manifest is None:
            raise DetrunError(f"no run {run_id!r} under {self.root} (no {path})")
        for name, kind in REQUIRED.items():
            value = manifest.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                got = f"a {type(value).__name__}" if name in manifest else "nothing"
                raise DetrunError(f"{path}: manifest field {name!r} must be a {kind.__name__}, got {got}")
        return cast(Manifest, manifest)

    def damage(self, run_id: str) -> str:
        """Why the run cannot be read ("" when it can): its manifest, or a rows file whose Parquet footer is
        not whole. What list and history call damaged (history also finds damage deeper in the rows it reads)."""
        try:
            self.manifest(run_id)
            for path in self.row_files(run_id):
                read_footer(self.fs, path)
        except DetrunError as exc:
            return str(exc)
        return ""

    def finish_run(self, run_id: str, status: str, **extra) -> None:
        manifest = self.manifest(run_id)
        manifest["status"], manifest["finished"] = status, datetime.now(timezone.utc).isoformat()
        self.write_manifest(_with(manifest, extra))

    def reopen_run(self, run_id: str, **extra) -> Manifest:
        """Mark an existing run running again (resume), keeping a history of its resumptions."""
        manifest = self.manifest(run_id)
        stamp = datetime.now(timezone.utc).isoformat()
        manifest["status"], manifest["driver"] = RunStatus.RUNNING, driver_record()
        manifest["resumed"] = manifest.get("resumed", []) + [stamp]
        manifest = _with(manifest, extra)
        self.write_manifest(manifest)
        return manifest

    def beat(self, run_id: str) -> None:
        """Refresh the driver's heartbeat in a running run's manifest (heartbeat.py)."""
        manifest = self.manifest(run_id)
        manifest["driver"] = driver_record()
        self.write_manifest(manifest)

    def write_timings(self, run_id: str, shard: str, doc: dict) -> None:
        """Where one shard's seconds went (stages.py); informational, never read by compare."""
        self.write_json(posixpath.join(run_id, "timings", f"{shard}.json"), doc)

    def read_timings(self, run_id: str) -> Dict[str, dict]:
        names = self.list_names(posixpath.join(run_id, "timings"), ".json")  # [] when there is none
        docs = {n[: -len(".json")]: self.read_json(posixpath.join(run_id, "timings", n), "timings") for n in names}
        return {shard: doc for shard, doc in docs.items() if doc is not None}  # None: removed since listed

    def record_submission(self, run_id: str, address: str, submission_id: str) -> None:
        """Remember a Jobs API submission beside the runs (the job may not have written a manifest yet)."""
        record = self.submission(run_id)
        ids = record["submission_ids"] if record is not None else []
        doc = SubmissionRecord(run_id=run_id, address=address, submission_ids=ids + [submission_id])
        self.write_json(posixpath.join(".submissions", f"{run_id}.json"), dict(doc))

    def submission(self, run_id: str) -> Optional[SubmissionRecord]:
        """The Jobs API submissions of a run, or None; an unreadable record is a DetrunError naming it."""
        return cast(Optional[SubmissionRecord],
                    self.read_json(posixpath.join(".submissions", f"{run_id}.json"), "submission record"))

    def list_runs(self) -> List[str]:
        if not self._exists(self.base):
            return []
        sel = pafs.FileSelector(self.base, recursive=False)
        infos = self.fs.get_file_info(sel)
        runs = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
        return sorted(r for r in runs if self._exists(self._p(r, "manifest.json")))

    # -- rows
    def write_rows(self, run_id: str, shard: str, rows: Sequence[dict]) -> str:
        table = pa.Table.from_pylist([make_row(**r) for r in rows], schema=SCHEMA)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        path = self._p(run_id, "rows", f"part-{shard}.parquet")
        self._write_atomic(path, sink.getvalue().to_pybytes())
        return path

    def row_files(self, run_id: str) -> List[str]:
        rows_dir = self._p(run_id, "rows")
        if not self._exists(rows_dir):
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(rows_dir))
        return sorted(i.path for i in infos if i.path.endswith(".parquet"))

    def shard_keys(self, run_id: str, shard: str) -> Optional[set]:
        """The keys stored for one shard; None when its part file is missing or unreadable."""
        path = self._p(run_id, "rows", f"part-{shard}.parquet")
        if not self._exists(path):
            return None
        try:
            return set(read_part(self.fs, path, columns=["key"]).column("key").to_pylist())
        except DetrunError:
            return None  # a resume rewrites it

    def read_rows(self, run_ids: Iterable[str]) -> pa.Table:
        tables = []
        for run_id in run_ids:
            self.manifest(run_id)
            tables += [read_part(self.fs, path, schema=SCHEMA) for path in self.row_files(run_id)]
        return as_stored(pa.concat_tables(tables)) if tables else SCHEMA.empty_table()

    def dataset(self, run_ids: Optional[Sequence[str]] = None) -> pads.Dataset:
        """The rows of these runs (default: every run under the root) as one pyarrow dataset."""
        runs = self.list_runs() if run_ids is None else run_ids
        files = [f for run_id in runs for f in self.row_files(run_id)]
        return pads.dataset(files, schema=SCHEMA, format="parquet", filesystem=self.fs)

    # -- blobs: one copy per digest under the root; a run's rows name the digests it uses
    def _blob(self, digest: str) -> str:
        if not DIGEST.fullmatch(digest):
            raise ValueError(f"not a digest: {digest!r}")
        return self._p("blobs", digest[:2], f"{digest}.bin")

    def write_blobs(self, blobs: Dict[str, bytes]) -> int:
        """Store each tensor's bytes once for all runs: a digest already there (with as many bytes) is
        skipped. Returns how many were written. Writers of one digest at once write the same bytes,
        each whole (_write_atomic), so whichever lands last leaves the same file."""
        written = 0
        for digest, data in blobs.items():
            path = self._blob(digest)
            info = self.fs.get_file_info(path)
            if info.type != pafs.FileType.File or info.size != len(data):
                self._write_atomic(path, data)
                written += 1
        return written

    def read_blob(self, run_ids: Iterable[str], digest: str) -> Optional[bytes]:
        """A tensor's bytes: from the root's shared blobs, else from a run's own (older runs); None if absent."""
        if not DIGEST.fullmatch(digest):  # a row names it: never a path outside the blobs
            return None
        for path in [self._blob(digest)] + [self._p(r, "blobs", f"{digest}.bin") for r in run_ids]:
            if self._exists(path):
                with self.fs.open_input_stream(path) as f:
                    return f.read()
        return None

    def blob_home(self, run_ids: Iterable[str] = ()) -> str:
        """Where read_blob looks for a digest's bytes, for messages: the root's blobs folder."""
        return self.where("blobs")

    def blob_refs(self, run_id: str) -> Set[str]:
        """The digests a run's rows reference (its claim on the shared blobs; rows hold them per shard)."""
        table = self.dataset([run_id]).to_table(columns=["out_digest", "lse_digest"])
        return {d for column in table.columns for d in column.to_pylist() if d}


class RunSet:
    """Runs named on the command line, each read from where it was found (ids under one root, or run
    directories from several roots, renamed or sharing an id): label -> (store, directory name).
    Reads only; the label is the run's name in every verdict."""

    def __init__(self, refs: Dict[str, Tuple[RunStore, str]]):
        self.refs = refs
        self.root = ", ".join(sorted({store.root for store, _ in refs.values()}))
        self.fs = next(iter(refs.values()))[0].fs if refs else pafs.LocalFileSystem()

    def manifest(self, label: str) -> Manifest:
        store, name = self.refs[label]
        manifest = store.manifest(name)
        manifest["run_id"] = label
        return manifest

    def has_run(self, label: str) -> bool:
        return label in self.refs and self.refs[label][0].has_run(self.refs[label][1])

    def row_files(self, label: str) -> List[str]:
        store, name = self.refs[label]
        return store.row_files(name)

    def read_blob(self, labels: Iterable[str], digest: str) -> Optional[bytes]:
        for label in labels:
            store, name = self.refs[label]
            found = store.read_blob([name], digest)
            if found is not None:
                return found
        return None

    def blob_home(self, labels: Iterable[str] = ()) -> str:
        return ", ".join(dict.fromkeys(self.refs[label][0].blob_home() for label in labels)) or self.root

    def dataset(self, labels: Optional[Sequence[str]] = None) -> pads.Dataset:
        files = [f for label in (labels if labels is not None else self.refs) for f in self.row_files(label)]
        return pads.dataset(files, schema=SCHEMA, format="parquet", filesystem=self.fs)

    def read_rows(self, labels: Iterable[str]) -> pa.Table:
        return as_stored(self.dataset(list(labels)).to_table())

    def __getattr__(self, name: str):
        raise DetrunError(f"runs from several places ({self.root}) can only be compared, not used for {name}; "
                          "pass run ids under one --runs-root")


def run_dirs(root: str, run_ids: Sequence[str]):
    """Read exactly the runs given: ids under root, or paths of run directories (each read where it is).
    Returns (a RunStore or, when runs come from elsewhere, a RunSet; the labels to compare)."""
    refs: Dict[str, Tuple[RunStore, str]] = {}
    given: List[Tuple[str, RunStore, str]] = []
    for rid in run_ids:
        if ("/" in rid or os.sep in rid) and os.path.isfile(os.path.join(rid, "manifest.json")):
            parent, name = os.path.split(os.path.abspath(rid.rstrip("/").rstrip(os.sep)))
            given.append((rid, RunStore(parent), name))
        else:
            given.append((rid, RunStore(root), rid))
    places = [(store.base, name) for _, store, name in given]
    twice = sorted({f"{b}/{n}" for b, n in places if places.count((b, n)) > 1})
    if twice:
        raise DetrunError(f"the same run is given twice: {', '.join(twice)} (compare a run with itself across "
                          "repeats by giving it once)")
    names = [name for _, _, name in given]
    for rid, store, name in given:
        refs[name if names.count(name) == 1 else rid.rstrip("/")] = (store, name)
    labels = list(refs)
    stores = {store.base for store, _ in refs.values()}
    if len(stores) == 1 and all(label == name for label, (_, name) in refs.items()):
        return next(iter(refs.values()))[0], labels
    return RunSet(refs), labels


def runs_under(req: RunsRequest) -> Iterator[Tuple[str, Union[Manifest, DetrunError]]]:
    """detrun list: each run under req.runs_root with its manifest, or why it is damaged (RunStore.damage)."""
    store = RunStore(req.runs_root)
    for run_id in store.list_runs():
        damage = store.damage(run_id)
        yield run_id, DetrunError(damage) if damage else store.manifest(run_id)
