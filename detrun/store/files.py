"""A runs root's files: a local path or any pyarrow.fs URI (e.g. s3://bucket/runs), written whole or not
at all, and a storage error (wrong credentials, a missing bucket, a full disk) as one DetrunError naming
the root. What lives where under the root: runs.py."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import posixpath
import re
import uuid
from typing import List, Optional, Tuple, Type

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import DetrunError, first_line
from ..paths import check_writable_dir
from ..signals import held

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


def guarded(cls):
    """Every public method cls defines runs under storage_errors(self.root)."""

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


@guarded
class Files:
    """The files under one runs root: bytes and JSON documents by path relative to the root."""

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
