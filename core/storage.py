"""Local paths and s3:// URIs behind one filesystem interface (pyarrow's), so every reader and
writer works on both: the batch job's documents and results, and the pools' adapters."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from urllib.parse import urlparse

from pyarrow import fs as pafs

S3_SCHEME = "s3://"


class StorageError(Exception):
    """A path that cannot be read or written, with the path and the reason."""


@dataclass(frozen=True)
class Location:
    """A file or folder: the filesystem it lives on and its path there, plus the URI a person wrote."""

    fs: pafs.FileSystem
    path: str
    uri: str

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def child(self, name: str) -> Location:
        return Location(self.fs, f"{self.path.rstrip('/')}/{name}", f"{self.uri.rstrip('/')}/{name}")

    def sibling(self, suffix: str) -> Location:
        """`<this path><suffix>`: where the job keeps state beside its output."""
        return Location(self.fs, self.path.rstrip("/") + suffix, self.uri.rstrip("/") + suffix)

    def kind(self) -> pafs.FileType:
        try:
            return self.fs.get_file_info(self.path).type
        except OSError as error:
            raise StorageError(f"{self.uri}: cannot be looked up: {error}") from error

    def exists(self) -> bool:
        return self.kind() != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.kind() == pafs.FileType.Directory

    def read_bytes(self) -> bytes:
        try:
            with self.fs.open_input_stream(self.path) as stream:
                return stream.read()
        except FileNotFoundError:
            raise StorageError(f"{self.uri}: no such file") from None
        except OSError as error:
            raise StorageError(f"{self.uri}: cannot be read: {error}") from error

    def write_bytes(self, data: bytes) -> None:
        """Writes the whole file so that readers see the old one or the new one, never half of it:
        locally through a temporary file and a rename; an object store's PUT is already whole."""
        try:
            self.make_parent()
            if not self.is_local:
                with self.fs.open_output_stream(self.path) as stream:
                    stream.write(data)
                return
            scratch = f"{self.path}.tmp-{uuid.uuid4().hex[:8]}"
            with open(scratch, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(scratch, self.path)
        except OSError as error:
            raise StorageError(f"{self.uri}: cannot be written: {error}") from error

    def make_parent(self) -> None:
        parent = self.path.rstrip("/").rsplit("/", 1)[0]
        # An object store has no folders to make (and making one could create a bucket).
        if self.is_local and parent and parent != self.path:
            self.fs.create_dir(parent, recursive=True)

    def make_dir(self) -> None:
        if not self.is_local:
            return
        try:
            self.fs.create_dir(self.path, recursive=True)
        except OSError as error:
            raise StorageError(f"{self.uri}: cannot be created: {error}") from error

    def list_files(self) -> list[str]:
        """Every file under this folder, as paths relative to it, sorted."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        except OSError as error:
            raise StorageError(f"{self.uri}: cannot be listed: {error}") from error
        root = self.path.rstrip("/") + "/"
        return sorted(info.path[len(root):] for info in infos if info.type == pafs.FileType.File)


def locate(uri: str, *, endpoint_url: str | None = None, region: str | None = None) -> Location:
    """A local path (made absolute: a Ray job runs in a copy of its working directory) or an
    s3:// URI, on S3 or any S3-compatible endpoint; credentials come from the standard chain."""
    if not uri.startswith(S3_SCHEME):
        return Location(pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(uri)), uri)
    bucket_and_key = uri[len(S3_SCHEME):].strip("/")
    if not bucket_and_key:
        raise StorageError(f"{uri}: an s3:// URI needs a bucket")
    return Location(s3_filesystem(endpoint_url, region), bucket_and_key, uri)


def s3_filesystem(endpoint_url: str | None = None, region: str | None = None) -> pafs.S3FileSystem:
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    options: dict = {"region": region}
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        options.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
    return pafs.S3FileSystem(**options)
