"""The class path of a unit's Spark JVMs as one jar, built at setup (`class_archive_build`).

A unit's JVMs (the Spark driver, which holds RayDP's app master, and the executors) would each start with 264
jars on the class path: ours, RayDP's, Spark's and Ray's. Logging, Hadoop and Spark look up
resources across the whole class path as they start (service registrations, log4j's providers
and plugins), which opens every jar: about 0.3 s of each JVM's start on the project's 2-core
machines, and a unit's start waits for two JVMs one after the other. One jar is opened once.

The merge keeps what the JVMs saw on the class path it replaces:
- a class or resource comes from the first jar that holds it, in the class path's order;
- every jar's service registrations (`META-INF/services/*`) are kept, in that order, in one file;
- every jar's log4j plugin cache (`Log4j2Plugins.dat`) is kept, merged into one as log4j merges
  those it finds: a plugin's first entry wins. Log4j's own appenders, layouts and converters are
  listed in log4j-core's, which is not the first on the class path;
- a multi-release jar's versioned entries (`META-INF/versions/N/...`) are kept where the jar also
  gave the entry's base (or no jar has one); other jars' are inert, and left out;
- signatures, manifests, `module-info` and jar indexes are dropped: the jar is one unsigned,
  multi-release jar of the unnamed module.

It lives in a Spark home of its own (`jars/` holds it alone, `bin/` is pyspark's), which the
driver's launcher reads: `spark-submit` adds its `jars/*` to every driver's class path.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import shutil
import struct
import zipfile
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import BinaryIO

from compute.build.jars import jar_paths, jars_dir

SPARK_HOME_PREFIX = "spark-home-"
JAR_NAME = "lakeport-unit-classes.jar"
# Part of the Spark home's name: raised whenever the merge's rules change, so that setup builds
# the jar again rather than finding one merged by the old rules (2: log4j's plugin caches merged).
MERGE_RULES = 2
SERVICES = "META-INF/services/"
LOG4J_PLUGINS = "META-INF/org/apache/logging/log4j/core/config/plugins/Log4j2Plugins.dat"
VERSIONED = re.compile(r"META-INF/versions/\d+/(.+)")
MANIFEST = "Manifest-Version: 1.0\r\nMulti-Release: true\r\nCreated-By: Lakeport (compute/build/class_path_jar.py)\r\n\r\n"
_DROPPED = re.compile(
    r"META-INF/(MANIFEST\.MF|INDEX\.LIST|[^/]+\.(SF|RSA|DSA|EC)|SIG-[^/]*)|(.*/)?module-info\.class",
    re.IGNORECASE,
)


def raydp_entries() -> list[str]:
    """The class path RayDP starts its JVMs with: our jars, RayDP's, Spark's (a wildcard) and
    Ray's, in RayDP's own order."""
    from raydp.spark.ray_cluster_master import RAYDP_EXECUTOR_EXTRA_CLASSPATH, RayDPSparkMaster

    # Only the class's class-path logic is used: on a stand-in for the (Ray actor) instance.
    master = SimpleNamespace(
        _configs={RAYDP_EXECUTOR_EXTRA_CLASSPATH: os.pathsep.join(map(str, jar_paths()))}
    )
    return RayDPSparkMaster.__ray_actor_class__._prepare_jvm_classpath(master)


def source_jars() -> list[Path]:
    """RayDP's class path with its wildcards expanded (a directory's jars sorted by name)."""
    jars: list[Path] = []
    for entry in raydp_entries():
        jars += (
            sorted(map(Path, glob.glob(entry + ".jar"))) if entry.endswith("*") else [Path(entry)]
        )
    return jars


def spark_home(jars: list[Path] | None = None, directory: Path | None = None) -> Path:
    """The Spark home of the merged class path of `jars` (its name follows their names and
    sizes, and the merge's rules: another jar, another home)."""
    jars = source_jars() if jars is None else jars
    named = [f"rules {MERGE_RULES}", *(f"{jar.name} {_size(jar)}" for jar in jars)]
    key = hashlib.sha256("\n".join(named).encode()).hexdigest()[:12]
    return (directory or jars_dir()).resolve() / f"{SPARK_HOME_PREFIX}{key}"


def class_path_jar() -> Path | None:
    """The merged jar, or None when setup has not built it for these jars (the JVMs then start
    on the jars themselves)."""
    jar = _spark_home_of(jars_dir(), tuple(jar_paths())) / "jars" / JAR_NAME
    return jar if jar.is_file() else None


@functools.lru_cache(maxsize=4)
def _spark_home_of(directory: Path, ours: tuple[Path, ...]) -> Path:
    """`spark_home()` of RayDP's class path, found once per process (listing and sizing its jars
    takes milliseconds, and a unit's host asks on its way to its session several times). Both
    arguments are the cache's key: the jars directory and our jars, which that class path starts with."""
    return spark_home(directory=directory)


def build(log=print, jars: list[Path] | None = None, directory: Path | None = None) -> Path:
    """Build the merged jar and its Spark home unless they exist; returns the jar's path."""
    import pyspark

    jars = source_jars() if jars is None else jars
    home = spark_home(jars, directory)
    jar = home / "jars" / JAR_NAME
    if jar.is_file():
        log(f"unit class path present: {home.name}")
        return jar
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "jars").mkdir(parents=True)
    (partial / "bin").symlink_to(Path(pyspark.__file__).parent / "bin")
    entries = merge(jars, partial / "jars" / JAR_NAME)
    shutil.rmtree(home, ignore_errors=True)  # what is left of a home whose jar is gone
    partial.rename(home)  # whole or not at all: a JVM never opens a half-written jar
    for stale in home.parent.glob(f"{SPARK_HOME_PREFIX}*"):
        if stale != home:
            shutil.rmtree(stale, ignore_errors=True)
    log(
        f"built unit class path {home.name}/jars/{JAR_NAME} ({len(jars)} jars, {entries} entries, "
        f"{jar.stat().st_size >> 20} MiB)"
    )
    return jar


def merge(jars: list[Path], target: Path) -> int:
    """Write the entries of `jars` into one jar at `target` (the rules in the module's notes);
    returns how many it holds."""
    sources = [zipfile.ZipFile(jar) for jar in jars]
    try:
        base_from: dict[str, int] = {}  # entry name -> index of the jar it comes from
        gathered: dict[str, list[bytes]] = {}  # entry name -> every jar's, in class-path order
        for index, source in enumerate(sources):
            for name in source.namelist():
                if _left_out(name):
                    continue
                if _gathered(name):
                    gathered.setdefault(name, []).append(source.read(name))
                elif not VERSIONED.match(name):
                    base_from.setdefault(name, index)
        with _JarWriter(target) as merged:
            merged.add("META-INF/MANIFEST.MF", MANIFEST.encode())
            for name, parts in gathered.items():
                merged.add(
                    name,
                    merge_log4j_plugins(parts) if name == LOG4J_PLUGINS else _concatenated(parts),
                )
            written = {"META-INF/MANIFEST.MF", *gathered}
            for index, (jar, source) in enumerate(zip(jars, sources)):
                multi_release = _is_multi_release(source)
                with jar.open("rb") as raw:
                    for info in source.infolist():
                        name = info.filename
                        if name in written or _left_out(name):  # every gathered entry is written
                            continue
                        if versioned := VERSIONED.match(name):
                            if (
                                not multi_release
                                or base_from.get(versioned.group(1), index) != index
                            ):
                                continue
                        elif base_from[name] != index:
                            continue
                        merged.copy(raw, info)
                        written.add(name)
        return len(written)
    finally:
        for source in sources:
            source.close()


def _left_out(name: str) -> bool:
    return name.endswith("/") or _DROPPED.fullmatch(name) is not None


def _gathered(name: str) -> bool:
    """An entry whose every jar's copy counts: the JVM's and log4j's lookups read them all."""
    return name.startswith(SERVICES) or name == LOG4J_PLUGINS


def _concatenated(parts: list[bytes]) -> bytes:
    return b"".join(part.rstrip(b"\r\n") + b"\n" for part in parts)


def merge_log4j_plugins(caches: list[bytes]) -> bytes:
    """Log4j plugin caches merged into one, as log4j's `PluginCache.loadCacheFiles` merges those
    it finds: categories by their lower-case names, and in each a plugin's first entry wins. The
    format is Java's `DataOutput`: a count of categories; for each its name and a count of
    entries; for each its key, class and name (`writeUTF`: a 2-byte length, then the bytes) and
    two booleans. Names are kept as the bytes they are."""
    categories: dict[bytes, dict[bytes, bytes]] = {}
    for cache in caches:
        reader = _DataReader(cache)
        for _ in range(reader.int()):
            plugins = categories.setdefault(reader.utf().lower(), {})
            for _ in range(reader.int()):
                key, class_name, name, flags = (
                    reader.utf(),
                    reader.utf(),
                    reader.utf(),
                    reader.take(2),
                )
                plugins.setdefault(key, _utf(class_name) + _utf(name) + flags)
    out = [struct.pack(">i", len(categories))]
    for category, plugins in categories.items():
        out += [_utf(category), struct.pack(">i", len(plugins))]
        out += [_utf(key) + rest for key, rest in plugins.items()]
    return b"".join(out)


class _DataReader:
    """Reads what Java's `DataOutputStream` wrote."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def take(self, size: int) -> bytes:
        if self._at + size > len(self._data):
            raise ValueError(f"{LOG4J_PLUGINS}: cut short")
        self._at += size
        return self._data[self._at - size : self._at]

    def int(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def utf(self) -> bytes:
        return self.take(struct.unpack(">H", self.take(2))[0])


def _utf(text: bytes) -> bytes:
    return struct.pack(">H", len(text)) + text


class _JarWriter:
    """Writes a jar whose entries are mostly copied from other jars as their compressed bytes
    stand (inflating and deflating again 2 GiB of classes took a minute of setup). Its end
    records are ZIP64's: a unit's class path holds over 65,535 entries (each entry and offset
    stays under 4 GiB, as the format's 32-bit fields need)."""

    def __init__(self, path: Path) -> None:
        self._out = path.open("wb")
        self._central: list[bytes] = []

    def __enter__(self) -> _JarWriter:
        return self

    def __exit__(self, *exc) -> None:
        try:
            if exc[0] is None:
                self._finish()
        finally:
            self._out.close()

    def add(self, name: str, data: bytes) -> None:
        """An entry of `data`, deflated."""
        deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
        raw = deflate.compress(data) + deflate.flush()
        self._write(
            name, raw, zipfile.ZIP_DEFLATED, zlib.crc32(data), len(data), (1980, 1, 1, 0, 0, 0)
        )

    def copy(self, jar: BinaryIO, info: zipfile.ZipInfo) -> None:
        """The entry `info` of the jar open as `jar`, its compressed bytes as they are (read
        from the entry's local header on, which `info.header_offset` locates)."""
        if (
            info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
            or info.flag_bits & 0x1
        ):
            raise ValueError(
                f"{jar.name}: {info.filename} is neither stored nor deflated in the clear"
            )
        jar.seek(info.header_offset)
        header = struct.unpack(_LOCAL_HEADER, jar.read(struct.calcsize(_LOCAL_HEADER)))
        if header[0] != 0x04034B50:
            raise ValueError(
                f"{jar.name}: {info.filename} has no local header where the directory says"
            )
        jar.seek(header[9] + header[10], os.SEEK_CUR)  # past the name and the extra field
        raw = jar.read(info.compress_size)
        self._write(
            info.filename, raw, info.compress_type, info.CRC, info.file_size, info.date_time
        )

    def _write(
        self, name: str, raw: bytes, method: int, crc: int, size: int, date_time: tuple
    ) -> None:
        encoded, offset = name.encode(), self._out.tell()
        flags = 0 if name.isascii() else 0x800  # the name in UTF-8
        year, month, day, hour, minute, second = date_time
        dos_time, dos_date = (
            hour << 11 | minute << 5 | second // 2,
            (year - 1980) << 9 | month << 5 | day,
        )
        if max(offset, len(raw), size) >= 0xFFFFFFFF:
            raise ValueError(f"{name}: past the 4 GiB a jar entry's fields hold")
        self._out.write(
            struct.pack(
                _LOCAL_HEADER,
                0x04034B50,
                20,
                flags,
                method,
                dos_time,
                dos_date,
                crc,
                len(raw),
                size,
                len(encoded),
                0,
            )
            + encoded
            + raw
        )
        self._central.append(
            struct.pack(
                _CENTRAL_HEADER,
                0x02014B50,
                20,
                20,
                flags,
                method,
                dos_time,
                dos_date,
                crc,
                len(raw),
                size,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + encoded
        )

    def _finish(self) -> None:
        start = self._out.tell()
        self._out.write(b"".join(self._central))
        size, count, end = self._out.tell() - start, len(self._central), self._out.tell()
        self._out.write(
            struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, start)
        )
        self._out.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
        self._out.write(
            struct.pack(
                "<IHHHHIIH",
                0x06054B50,
                0,
                0,
                min(count, 0xFFFF),
                min(count, 0xFFFF),
                min(size, 0xFFFFFFFF),
                min(start, 0xFFFFFFFF),
                0,
            )
        )


_LOCAL_HEADER = "<IHHHHHIIIHH"
_CENTRAL_HEADER = "<IHHHHHHIIIHHHHHII"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1  # a missing jar: no home is built for it, so none is found


def _is_multi_release(source: zipfile.ZipFile) -> bool:
    try:
        manifest = source.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except KeyError:
        return False
    return (
        re.search(r"^Multi-Release:\s*true\s*$", manifest, re.IGNORECASE | re.MULTILINE) is not None
    )
