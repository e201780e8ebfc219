"""A class-data-sharing archive (JDK AppCDS) of the classes a compute unit's Spark JVMs load.

On two cores most of a Spark JVM's start, and of the first Iceberg write, is reading, parsing
and verifying tens of thousands of classes. A CDS archive holds them already parsed and verified,
mapped from one file: measured here, a local Spark session plus its first Iceberg write went
from 7.3–10.6 s to 3.6 s, and a RayDP executor's first job from 7.0 s to 4.8 s.

Built at setup (`python -m compute.build.class_archive_build`), never by a unit: the archive is code the
JVMs trust, so units only ever read it (the sandbox mounts the jars directory read-only). How:

1. a training run, a RayDP session on a Ray node of its own doing what a unit's host and an
   execution do (the write-path warm-up through a REST catalog and S3A, a scan, an aggregation,
   a Python worker's job), lists the classes its driver (with RayDP's app master) and executor load
   (`-XX:DumpLoadedClassList`, merged into one list);
2. `java -Xshare:dump` writes them into the archive for the class path RayDP starts its JVMs
   with. A JDK uses an archive only when the JVM's class path starts with the one it was
   dumped for, and the jars are unchanged; otherwise the JVM starts as it would without one.

The driver (py4j, which holds RayDP's app master) starts with that class path and uses the archive.
The executors are Ray Java workers, which Ray starts on its own jars alone and which load
Spark's classes through Ray's job class loader, which CDS does not serve. So their JVM options
repeat the class path (a later `-cp` wins): the application class loader, which Ray's loader
asks first, then loads Spark from the archive as well. The driver runs Ray's Java runtime
on exactly that class path, so Ray's classes are found the same way.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from compute.build.jars import jars_dir

ARCHIVE_PREFIX = "spark-classes-"


def raydp_class_path() -> str:
    """The class path a unit's Spark JVMs start with: the one jar setup merged RayDP's class
    path into (compute/build/class_path_jar.py), or else that class path itself: our jars, RayDP's,
    Spark's and Ray's, in RayDP's own order."""
    from compute.build.class_path_jar import class_path_jar, raydp_entries

    merged = class_path_jar()
    return str(merged) if merged is not None else os.pathsep.join(raydp_entries())


def archive_path(class_path: str | None = None, directory: Path | None = None) -> Path:
    """Where the archive for this class path, this JDK and this training run lives: a new jar,
    JDK or training run (class_archive_build.py), a new file. A jar written again under the same
    name (the merged one, rebuilt) is a new jar too: the JVM maps an archive only while each jar
    has the size and time it had at the dump."""
    class_path = class_path or raydp_class_path()
    stamps = " ".join(_stamp(Path(entry)) for entry in class_path.split(os.pathsep))
    key = hashlib.sha256(
        f"{class_path}\n{stamps}\n{_java_version()}\n{_training_digest()}".encode()
    ).hexdigest()[:12]
    return (directory or jars_dir()).resolve() / f"{ARCHIVE_PREFIX}{key}.jsa"


def archive_java_options() -> str:
    """The JVM options that use the archive, or nothing when it was not built on this node."""
    path = archive_path()
    # This JDK relocates an archive to a random address by default (ASLR), which writes every
    # page of it: each JVM then holds a private copy (about 140 MiB here) and spends its start
    # on relocating. Mapped where it was dumped, the pages stay shared and mostly untouched.
    # ASLR inside a Spark JVM guards nothing here: user code in a run already runs in it.
    return (
        f"-XX:SharedArchiveFile={path} -Xshare:auto -XX:+UnlockDiagnosticVMOptions "
        "-XX:ArchiveRelocationMode=0"
        if path.is_file()
        else ""
    )


def executor_java_options() -> str:
    """The executors' JVM options for the archive: its class path, then the archive."""
    options = archive_java_options()
    return f"-cp {raydp_class_path()} {options}" if options else ""


def _stamp(path: Path) -> str:
    try:
        status = path.stat()
    except OSError:
        return "-"  # a wildcard, or a jar not there
    return f"{status.st_size}:{status.st_mtime_ns}"


@functools.cache
def _training_digest() -> str:
    return hashlib.sha256(
        Path(__file__).with_name("class_archive_build.py").read_bytes()
    ).hexdigest()


@functools.cache
def _java_version() -> str:
    """Which JDK the JVMs run: where it is and its `release` file, read rather than asked of a
    JVM (`java -version` cost a unit's host 0.1-0.2 s on the way to its session), which is
    asked only of a JDK without that file."""
    if java := shutil.which("java"):
        home = Path(java).resolve().parent.parent
        try:
            return f"{home}\n{(home / 'release').read_text()}"
        except OSError:
            pass
    return subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.strip()
