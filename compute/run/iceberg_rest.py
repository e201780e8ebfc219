"""How code on a compute unit opens a warehouse with pyiceberg: the catalog's REST API with the
run's token, asking for vended storage credentials, a FileIO that writes small files in one
request, and commits to several tables at once. The portal's catalogs share the first guard below.

- A table's own properties never configure how its files are reached
  (`CatalogConfiguredRestCatalog`): pyiceberg would merge them over the catalog's, so whoever may
  alter a table could choose the class a reader imports to read it, or a proxy for its storage
  requests.
- pyiceberg's own PyArrowFileIO opens every S3 output stream as a multipart upload: Create,
  UploadPart, Complete, three round trips for each data file, manifest and manifest list, however
  small. An execution writes six such files when it records its runtime stats and console logs.
  `SmallWritesFileIO` turns on pyarrow's `allow_delayed_open`, with which a file smaller than one
  part is sent as one PutObject when it is closed (measured on the dev stack: a 3 KB write 11 ms ->
  5 ms). The price, per pyarrow: a bad bucket shows when the file is closed, not when it is
  opened, and pyiceberg closes every file it writes before it commits. Its files also know the
  length written to them (`LengthKnownFile`): pyiceberg asks for the length of every data file
  and manifest it writes, and PyArrowFile answers with a HEAD request, two more round trips one
  after another in each record.
- Its files are stored behind the writer (`SmallWritesFileIO.wait_for_uploads`): a file's
  PutObject runs on an upload thread once pyiceberg closes it, so a record's data file, manifest
  and manifest list travel side by side rather than one after another, and every commit waits
  for the uploads of the tables it changes before it is sent (`CatalogConfiguredRestCatalog.
  commit_table`, `commit_together`): a commit never names a file that is not stored. A failed
  upload fails the commit, before anything is committed.
- `MetadataOnceTransaction` stages changes without pyiceberg's deep copy of the table's metadata on
  every read of it, and appends without converting the same Arrow schema again on every append.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import BUFFER_SIZE, ONE_MEGABYTE, PyArrowFile, PyArrowFileIO
from pyiceberg.table import Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.update import update_table_metadata
from pyiceberg.typedef import EMPTY_DICT, Properties

from compute.contract import ACCESS_DELEGATION, ACCESS_DELEGATION_HEADER

# pyiceberg's property naming the FileIO class its catalogs and tables use.
FILE_IO_PROPERTY = "py-io-impl"
# The threads that store closed files, kept from run to run (a new thread waits for the interpreter's
# lock before it runs). A run's records close six files; the rest wait their turn.
_UPLOADS = ThreadPoolExecutor(6, thread_name_prefix="iceberg-upload")


class SmallWritesFileIO(PyArrowFileIO):
    """PyArrowFileIO whose S3 file systems send a small file as one PutObject, whose output
    files know the length written to them, and whose closed files are stored behind the writer
    (`wait_for_uploads` before any commit that names them)."""

    def __init__(self, properties: Properties = EMPTY_DICT) -> None:
        super().__init__(properties)
        self._uploads: dict[str, Future] = {}  # location → its upload, until a wait collects it
        self._uploads_lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickled without its uploads, which stay with the process that wrote the files."""
        self.wait_for_uploads()
        return {
            key: value
            for key, value in super().__getstate__().items()
            if key not in ("_uploads", "_uploads_lock")
        }

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._uploads, self._uploads_lock = {}, threading.Lock()

    def _initialize_s3_fs(self, netloc: str | None):
        made = super()._initialize_s3_fs(netloc)
        # pyarrow pickles an S3FileSystem as (rebuild, (options,)): the same options, one changed.
        rebuild, (options,) = made.__reduce__()
        return rebuild({**options, "allow_delayed_open": True})

    def new_output(self, location: str) -> LengthKnownFile:
        scheme, netloc, path = self.parse_location(location, self.properties)
        return LengthKnownFile(
            location=location,
            path=path,
            fs=self.fs_by_scheme(scheme, netloc),
            buffer_size=int(self.properties.get(BUFFER_SIZE, ONE_MEGABYTE)),
            io=self,
        )

    def new_input(self, location: str):
        """A file to read: one written through this FileIO is read once it is stored."""
        with self._uploads_lock:
            upload = self._uploads.get(location)
        if upload is not None:
            upload.result()
        return super().new_input(location)

    def upload(self, location: str, store) -> None:
        """Run `store()` (a closed file's PutObject) on an upload thread."""
        with self._uploads_lock:
            self._uploads[location] = _UPLOADS.submit(store)

    def wait_for_uploads(self) -> None:
        """Return once every file closed so far is stored; raise the first upload's error, after
        all of them have ended, if any failed."""
        with self._uploads_lock:
            uploads, self._uploads = self._uploads, {}
        wait(uploads.values())
        for upload in uploads.values():
            upload.result()  # raises its error


class LengthKnownFile(PyArrowFile):
    """A PyArrowFile that, once written through `create` and closed, answers its length from the
    bytes written instead of asking the storage (a HEAD request). A file whose upload failed
    forgets that length: it is asked of the storage as before."""

    _written_length: int | None = None

    def __init__(self, *args, io: SmallWritesFileIO, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.io = io

    def create(self, overwrite: bool = False) -> _LengthNotingStream:
        return _LengthNotingStream(super().create(overwrite=overwrite), self)

    def __len__(self) -> int:
        return self._written_length if self._written_length is not None else super().__len__()


class _LengthNotingStream:
    """An output stream that tells its file how many bytes it held, and is stored by an upload
    thread once closed."""

    def __init__(self, stream, file: LengthKnownFile) -> None:
        self._stream, self._file = stream, file
        self._closed = False  # once closed here: its upload may not have closed the stream yet

    def write(self, data) -> int:
        return self._stream.write(data)

    def tell(self) -> int:
        return self._stream.tell()

    def flush(self) -> None:
        self._stream.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        length = self._stream.tell()
        # With allow_delayed_open, the stream's close is the PutObject (it raises if the file was
        # not stored): the FileIO's waits raise that error before any commit names the file.
        self._file._written_length = length
        self._file.io.upload(self._file.location, self._store)

    def _store(self) -> None:
        try:
            self._stream.close()
        except BaseException:
            self._file._written_length = None  # not stored: its length is the storage's to say
            raise

    def __enter__(self) -> _LengthNotingStream:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


class MetadataOnceTransaction(Transaction):
    """A pyiceberg transaction that works out its staged metadata once per change, and an
    append's schemas once per process. pyiceberg's own recomputes the metadata, a deep copy of
    the table's, on every read: 15 to 19 times for one append. Measured on a warm unit, a run's
    two records staged side by side and committed: 142-155 -> 113-125 ms. The copies are not
    mutated: pyiceberg's metadata models are frozen."""

    _computed: tuple = (None, None, None)  # (base metadata, updates, the metadata they make)

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates, metadata = self._computed
        if base is not self._table.metadata or updates is not self._updates:
            metadata = update_table_metadata(self._table.metadata, self._updates)
            self._computed = (self._table.metadata, self._updates, metadata)
        return metadata

    def append(self, df, snapshot_properties=EMPTY_DICT, branch=MAIN_BRANCH) -> None:
        """pyiceberg's append, except that the rows' Arrow schema is checked against the table's
        and converted to Iceberg's once per process for each pair of schemas (`_write_schema`),
        not twice on every append (a run's two records, written to local files in a loop: 15-18
        -> 11-13 ms each time). Anything but a pa.Table appended to an unpartitioned table is
        pyiceberg's own append."""
        import pyarrow as pa
        from pyiceberg.io.pyarrow import bin_pack_arrow_table, write_file
        from pyiceberg.table import DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE, TableProperties, WriteTask
        from pyiceberg.utils.config import Config
        from pyiceberg.utils.properties import property_as_int

        metadata = self.table_metadata
        if not isinstance(df, pa.Table) or not metadata.spec().is_unpartitioned():
            return super().append(df, snapshot_properties, branch)
        downcast = Config().get_bool(DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE) or False
        task_schema = _write_schema(metadata.schema(), df.schema, downcast, metadata.format_version)
        with self._append_snapshot_producer(snapshot_properties, branch=branch) as append_files:
            if df.shape[0] == 0:
                return  # an empty append is still a snapshot, as pyiceberg's
            target_size = property_as_int(
                metadata.properties,
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
            )
            tasks = (
                WriteTask(
                    write_uuid=append_files.commit_uuid,
                    task_id=task_id,
                    record_batches=batches,
                    schema=task_schema,
                )
                for task_id, batches in enumerate(bin_pack_arrow_table(df, target_size))
            )
            for data_file in write_file(io=self._table.io, table_metadata=metadata, tasks=tasks):
                append_files.append_data_file(data_file)


# Iceberg schemas to write Arrow rows with, by the pair of schemas they were worked out from.
_WRITE_SCHEMAS: dict[tuple, object] = {}
_WRITE_SCHEMAS_KEPT = 64


def _write_schema(table_schema, arrow_schema, downcast_ns_timestamp_to_us: bool, format_version):
    """The Iceberg schema that rows of `arrow_schema` are written with into a table of
    `table_schema`, once they are found compatible (pyiceberg's ValueError if not; a refusal is
    not kept): what pyiceberg's append works out twice per call, from the two schemas alone.
    The key holds every part of both that the answer depends on: the Iceberg schema's fields and
    identifier fields, and the Arrow schema with its field metadata (field ids map columns)."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, pyarrow_to_schema

    key = (
        table_schema.schema_id,
        table_schema.fields,
        tuple(table_schema.identifier_field_ids),
        arrow_schema.to_string(show_field_metadata=True, show_schema_metadata=True),
        downcast_ns_timestamp_to_us,
        format_version,
    )
    if (found := _WRITE_SCHEMAS.get(key)) is None:
        _check_pyarrow_schema_compatible(
            table_schema,
            provided_schema=arrow_schema,
            downcast_ns_timestamp_to_us=downcast_ns_timestamp_to_us,
            format_version=format_version,
        )
        found = pyarrow_to_schema(
            arrow_schema,
            name_mapping=table_schema.name_mapping,
            downcast_ns_timestamp_to_us=downcast_ns_timestamp_to_us,
            format_version=format_version,
        )
        if len(_WRITE_SCHEMAS) >= _WRITE_SCHEMAS_KEPT:
            _WRITE_SCHEMAS.clear()
        _WRITE_SCHEMAS[key] = found
    return found


class CatalogConfiguredRestCatalog(RestCatalog):
    """pyiceberg's REST catalog, except that how a table's files are reached comes from the
    catalog alone (its own properties, the config and the storage credentials it sends), never
    from the table's properties. pyiceberg merges those in, over the catalog's: whoever may alter
    a table (a user's code, the owner of a shared warehouse) could name the FileIO class the
    reader imports and instantiates (`py-io-impl`), or the proxy its storage requests go through.
    The table keeps its properties; only its FileIO is made without them."""

    def commit_table(self, table, requirements, updates):
        """pyiceberg's commit of one table, once the files it wrote for it are stored."""
        wait_for_uploads(table)
        return super().commit_table(table, requirements, updates)

    def _response_to_table(self, identifier_tuple, table_response):
        table = super()._response_to_table(
            identifier_tuple, _without_table_properties(table_response)
        )
        table.metadata = table_response.metadata
        return table

    def _response_to_staged_table(self, identifier_tuple, table_response):
        table = super()._response_to_staged_table(
            identifier_tuple, _without_table_properties(table_response)
        )
        table.metadata = table_response.metadata
        return table


def _without_table_properties(table_response):
    return table_response.model_copy(
        update={"metadata": table_response.metadata.model_copy(update={"properties": {}})}
    )


# A table's vended credentials this close to their expiry are renewed before the table writes
# (as VendedCredentialsFileIO's `lakeport.credentials.renew-before-ms` does on the JVM side).
RENEW_CREDENTIALS_BEFORE_S = 300.0


def credentials_expire_soon(
    io_properties, now: float, within_s: float = RENEW_CREDENTIALS_BEFORE_S
) -> bool:
    """Whether the storage credentials the catalog vended with a table (its FileIO's
    `s3.session-token-expires-at-ms`) expire within `within_s`; False when they state no expiry."""
    expires_ms = io_properties.get("s3.session-token-expires-at-ms")
    try:
        return expires_ms is not None and int(expires_ms) / 1000 - now < within_s
    except ValueError:
        return False


def wait_for_uploads(table) -> None:
    """Return once the files written through `table`'s FileIO are stored; raise if one was not."""
    if isinstance(table.io, SmallWritesFileIO):
        table.io.wait_for_uploads()


def rest_catalog(name: str, uri: str, warehouse: str, token: str):
    """A pyiceberg catalog of `warehouse` at `uri`, acting with `token`; the tables it loads carry
    the storage credentials the catalog vends for them."""
    return CatalogConfiguredRestCatalog(
        name,
        uri=uri,
        warehouse=warehouse,
        token=token,
        **{
            f"header.{ACCESS_DELEGATION_HEADER}": ACCESS_DELEGATION,
            FILE_IO_PROPERTY: f"{SmallWritesFileIO.__module__}.{SmallWritesFileIO.__qualname__}",
        },
    )


def commit_together(catalog, transactions) -> None:
    """Commit what each of `transactions` (pyiceberg transactions on tables of `catalog`, not
    committed) staged in one atomic multi-table commit, the REST catalog's
    `POST /v1/{prefix}/transactions/commit`: every table changes, or none does. Each table's
    requirements hold as its own commit would assert them, its uuid among them. Raises
    pyiceberg's CommitFailedException if a requirement fails, CommitStateUnknownException if
    the catalog cannot say whether the commit happened.

    pyiceberg 0.12 has no call for it: the request is built from what its transactions staged
    (`_updates`, `_requirements`) and sent on the catalog's own session (its token and headers).
    """
    from pyiceberg.catalog.rest.response import _handle_non_200_response
    from pyiceberg.exceptions import (
        CommitFailedException,
        CommitStateUnknownException,
        NoSuchTableError,
    )
    from pyiceberg.table import CommitTableRequest, TableIdentifier
    from pyiceberg.table.update import AssertTableUUID
    from requests import HTTPError

    changes = []
    for transaction in transactions:
        table = transaction._table
        wait_for_uploads(table)
        *namespace, name = table.name()
        request = CommitTableRequest(
            identifier=TableIdentifier(namespace=namespace, name=name),
            updates=transaction._updates,
            requirements=(
                *transaction._requirements,
                AssertTableUUID(uuid=table.metadata.table_uuid),
            ),
        )
        changes.append(json.loads(request.model_dump_json()))
    response = catalog._session.post(
        catalog.url("transactions/commit", prefixed=True),
        data=json.dumps({"table-changes": changes}).encode(),
    )
    try:
        response.raise_for_status()
    except HTTPError as error:
        _handle_non_200_response(
            error,
            {
                404: NoSuchTableError,
                409: CommitFailedException,
                500: CommitStateUnknownException,
                502: CommitStateUnknownException,
                504: CommitStateUnknownException,
            },
        )
