"""Files on storage shared by the Spark driver and executors (local disk, HDFS, S3...).

Everything goes through ``pyarrow.fs``, so a ``state.dir`` of ``/data/cdc``, ``hdfs://...`` or
``s3://...`` works the same. Writes are atomic (a temporary file, then a rename): a reader sees
a whole file or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from ...dialect.codec import dumps
from ...dialect.errors import CheckpointDamagedError, ConfigurationError

_IPC_OPTIONS = ipc.IpcWriteOptions(compression="lz4")


class StateStore:
    """Reads and writes files under one root directory."""

    def __init__(self, root: str, create: bool = True) -> None:
        """``create=False`` only reads: a missing root then reads as empty."""
        self.given = root  # as given: a URI's options (an S3 endpoint) reach the executors
        if "://" in root:
            # s3a:// (Hadoop's S3 connector, which Spark's checkpoint beside it needs) is S3
            uri = "s3://" + root[len("s3a://"):] if root.startswith("s3a://") else root
            self.fs, self.root = pafs.FileSystem.from_uri(uri)
        else:
            import os

            self.fs, self.root = pafs.LocalFileSystem(), os.path.abspath(root)
        if create:
            try:
                self.fs.create_dir(self.root, recursive=True)
            except (FileExistsError, NotADirectoryError) as exc:  # a file in the way
                raise ConfigurationError(f"state directory {self.uri} cannot be made: "
                                         f"{_file_in_the_way(self, exc)}") from None

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.given}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["uri"])  # type: ignore[misc]

    @property
    def uri(self) -> str:
        if isinstance(self.fs, pafs.LocalFileSystem):
            return str(self.root)
        return f"{self.fs.type_name}://{self.root}"

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def write_bytes(self, data: bytes | pa.Buffer, *parts: str) -> None:
        """Write atomically: readers never see a partial file."""
        target = self.path(*parts)
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        tmp = f"{target}.{uuid.uuid4().hex}.tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, target)

    def read_bytes(self, *parts: str) -> bytes | None:
        """A file's content, or None when it does not exist."""
        try:
            with self.fs.open_input_stream(self.path(*parts)) as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None

    def write_json(self, data: Any, *parts: str) -> None:
        self.write_bytes(dumps(data).encode(), *parts)

    def read_json(self, *parts: str) -> Any:
        """A JSON file's value, or None when it does not exist; one that is not whole JSON
        (cut short, overwritten) raises :class:`CheckpointDamagedError` naming it."""
        import json

        data = self.read_bytes(*parts)
        if data is None:
            return None
        try:
            return json.loads(data)
        except UnicodeDecodeError:
            raise self.damaged(parts, "not UTF-8 text") from None
        except ValueError as exc:
            raise self.damaged(parts, str(exc)) from None

    def damaged(self, parts: tuple[str, ...], problem: str) -> CheckpointDamagedError:
        """The error for the file at ``parts`` that cannot be read (``problem``: why), with
        the way out: a backup or a new sync, or for a file the sync writes again (the
        progress report, the owner's record, a request) what to do with it."""
        name = "/".join(parts)
        checkpoint = self.uri.removesuffix("/state")
        if name in ("progress.json", "progress-tables.json"):
            way = "delete it (a sync writes its report again at its next batch)"
        elif name == "owner.json":
            way = "delete it once no sync runs with this checkpoint"
        elif parts[0] == "requests":
            way = "delete it and ask for the snapshot again (sdk snapshot)"
        else:
            way = (f"restore {checkpoint} from a backup, or start a new sync with a new "
                   "--checkpoint directory (a new snapshot)")
        file = self.path(*parts).removeprefix(f"{self.root.removesuffix('/state')}/")
        return CheckpointDamagedError(f"checkpoint {checkpoint}: file {file} is damaged "
                                      f"({problem}): {way}")

    def put_content(self, data: Any, folder: str) -> str:
        """Store JSON under its content hash (immutable); return the hash."""
        text = dumps(data).encode()
        digest = hashlib.sha256(text).hexdigest()[:24]
        if self.read_bytes(folder, f"{digest}.json") is None:
            self.write_bytes(text, folder, f"{digest}.json")
        return digest

    def write_arrow(self, table: pa.Table, *parts: str) -> None:
        """An Arrow IPC file, LZ4-compressed: a staged split repeats its watermark on every
        row, and LZ4 takes an 8k-row split of benchmarks/e2e_sync.py's table from 1.6 MB to
        0.36 MB for about the same CPU (2.3 ms against 2.2 ms)."""
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema, options=_IPC_OPTIONS) as writer:
            writer.write_table(table)
        self.write_bytes(sink.getvalue(), *parts)

    def read_arrow(self, *parts: str) -> pa.Table | None:
        data = self.read_bytes(*parts)
        if data is None:
            return None
        try:
            return ipc.open_file(pa.py_buffer(data)).read_all()
        except pa.ArrowInvalid as exc:
            raise self.damaged(parts, str(exc)) from None

    def exists(self, *parts: str) -> bool:
        return bool(self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound)

    def move(self, source: tuple[str, ...], target: tuple[str, ...]) -> None:
        """Rename a file, replacing ``target``: atomic where the file system renames so (a
        local disk, HDFS), which makes it a claim only one of two renamers wins; raises
        FileNotFoundError when ``source`` is gone."""
        self.fs.move(self.path(*source), self.path(*target))

    def delete_dir(self, *parts: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.path(*parts))

    def delete_file(self, *parts: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(*parts))

    def list_dir(self, *parts: str) -> list[str]:
        """The names in a directory; none when it is missing, or removed while listed (a
        batch's stage cleaned up as the driver's progress display reads it)."""
        selector = pafs.FileSelector(self.path(*parts), allow_not_found=True)
        try:
            return [info.base_name for info in self.fs.get_file_info(selector)]
        except FileNotFoundError:
            return []


def _file_in_the_way(store: StateStore, error: OSError) -> str:
    """Which file keeps ``store``'s root from being a directory, as far as it can tell."""
    if isinstance(store.fs, pafs.LocalFileSystem):
        from pathlib import Path

        from ...job.spec import file_in_the_way

        place = file_in_the_way(Path(store.root))
        if place is not None:
            return f"{place} is a file, not a directory"
    return f"{type(error).__name__}: {error}"
