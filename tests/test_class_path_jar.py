"""A unit's class path merged into one jar (compute/build/class_path_jar.py): what a JVM finds in it is
what it found on the class path the jar replaces."""

from __future__ import annotations

import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from compute.build import class_path_jar, jars

MULTI_RELEASE = "Manifest-Version: 1.0\nMulti-Release: true\n"


def jar(
    path: Path, entries: dict[str, str], manifest: str | None = "Manifest-Version: 1.0\n"
) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        if manifest is not None:
            archive.writestr("META-INF/MANIFEST.MF", manifest)
        archive.writestr("a/", "")  # a directory entry
        for name, text in entries.items():
            archive.writestr(name, text)
    return path


def merged_entries(tmp_path: Path, *jars_: Path) -> dict[str, str]:
    target = tmp_path / "merged.jar"
    count = class_path_jar.merge(list(jars_), target)
    with zipfile.ZipFile(target) as merged:
        entries = {name: merged.read(name).decode() for name in merged.namelist()}
    assert count == len(entries)
    return entries


def test_an_entry_comes_from_the_first_jar_that_holds_it(tmp_path):
    first = jar(tmp_path / "first.jar", {"a/A.class": "A from first", "config.properties": "first"})
    second = jar(
        tmp_path / "second.jar",
        {"a/A.class": "A from second", "a/B.class": "B", "config.properties": "x"},
    )
    entries = merged_entries(tmp_path, first, second)
    assert entries["a/A.class"] == "A from first" and entries["config.properties"] == "first"
    assert entries["a/B.class"] == "B"
    assert "a/" not in entries


def test_every_jars_service_registrations_are_kept_in_class_path_order(tmp_path):
    service = "META-INF/services/org.apache.hadoop.fs.FileSystem"
    first = jar(tmp_path / "first.jar", {service: "org.first.FileSystem"})  # no newline at its end
    second = jar(tmp_path / "second.jar", {service: "# a comment\norg.second.FileSystem\n"})
    assert merged_entries(tmp_path, first, second)[service] == (
        "org.first.FileSystem\n# a comment\norg.second.FileSystem\n"
    )


def plugin_cache(categories: dict[str, list[tuple[str, str]]]) -> bytes:
    """A log4j plugin cache as log4j's `PluginCache.writeCache` writes it (Java's DataOutput)."""

    def utf(text: str) -> bytes:
        return struct.pack(">H", len(text.encode())) + text.encode()

    out = struct.pack(">i", len(categories))
    for category, plugins in categories.items():
        out += utf(category) + struct.pack(">i", len(plugins))
        for key, class_name in plugins:
            out += utf(key) + utf(class_name) + utf(key.title()) + b"\x01\x00"
    return out


def test_every_jars_log4j_plugins_are_kept_and_a_plugins_first_entry_wins(tmp_path):
    name = class_path_jar.LOG4J_PLUGINS
    first, second = tmp_path / "first.jar", tmp_path / "second.jar"
    with zipfile.ZipFile(first, "w") as archive:
        archive.writestr(name, plugin_cache({"Core": [("console", "first.Console")]}))
    with zipfile.ZipFile(second, "w") as archive:
        archive.writestr(
            name,
            plugin_cache(
                {
                    "core": [("console", "second.Console"), ("file", "second.File")],
                    "converter": [("n", "second.LineSeparator")],
                }
            ),
        )
    target = tmp_path / "merged.jar"
    class_path_jar.merge([first, second], target)
    with zipfile.ZipFile(target) as merged:
        assert merged.read(name) == plugin_cache(
            {
                "core": [("console", "first.Console"), ("file", "second.File")],
                "converter": [("n", "second.LineSeparator")],
            }
        )
    with pytest.raises(ValueError, match="cut short"):
        class_path_jar.merge_log4j_plugins([plugin_cache({"core": [("a", "b")]})[:-3]])


def test_log4j_finds_its_own_appenders_layouts_and_converters_in_the_setup_built_jar(tmp_path):
    """Log4j-core's plugin cache is not the first on a unit's class path (hive-exec's is): a jar
    that kept only the first lost the console appender and `%n`, and log4j said so on stderr."""
    merged = class_path_jar.class_path_jar()
    assert merged is not None, "setup builds it: python -m compute.build.class_archive_build"
    (tmp_path / "log4j2.properties").write_text(
        "rootLogger.level = info\nrootLogger.appenderRef.out.ref = out\n"
        "appender.out.type = Console\nappender.out.name = out\nappender.out.target = SYSTEM_OUT\n"
        "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%p] %m%n\n"
    )
    (tmp_path / "Logs.java").write_text(
        "public class Logs { public static void main(String[] args) {"
        ' org.apache.logging.log4j.LogManager.getLogger("check").info("hello"); } }'
    )
    ran = subprocess.run(
        [
            "java",
            "-cp",
            str(merged),
            f"-Dlog4j2.configurationFile={tmp_path / 'log4j2.properties'}",
            str(tmp_path / "Logs.java"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout == "[INFO] hello\n"
    assert "ERROR" not in ran.stderr, ran.stderr[-2000:]


def test_signatures_manifests_and_module_descriptors_are_dropped_and_the_jar_is_multi_release(
    tmp_path,
):
    signed = jar(
        tmp_path / "signed.jar",
        {
            "META-INF/SIGNER.SF": "digests",
            "META-INF/SIGNER.RSA": "signature",
            "META-INF/INDEX.LIST": "index",
            "META-INF/OTHER.dsa": "signature",
            "META-INF/SIG-X": "signature",
            "module-info.class": "module",
            "META-INF/versions/9/module-info.class": "module",
            "s/S.class": "S",
        },
        manifest=MULTI_RELEASE + "Name: s/S.class\nSHA-256-Digest: abc\n",
    )
    entries = merged_entries(tmp_path, signed)
    assert set(entries) == {"META-INF/MANIFEST.MF", "s/S.class"}
    assert "Multi-Release: true" in entries["META-INF/MANIFEST.MF"]
    assert "Digest" not in entries["META-INF/MANIFEST.MF"]


def test_versioned_entries_are_kept_only_from_the_multi_release_jar_that_gave_their_base(tmp_path):
    plain = jar(
        tmp_path / "plain.jar", {"p/P.class": "P", "META-INF/versions/11/p/P.class": "inert P"}
    )
    base = jar(
        tmp_path / "base.jar",
        {
            "m/M.class": "M",
            "META-INF/versions/11/m/M.class": "M for 11",
            "META-INF/versions/11/m/Only.class": "only versioned",
        },
        manifest=MULTI_RELEASE,
    )
    later = jar(
        tmp_path / "later.jar",
        {
            "m/M.class": "later M",
            "META-INF/versions/17/m/M.class": "later M 17",
            "p/P.class": "later P",
            "META-INF/versions/11/p/P.class": "later P 11",
        },
        manifest=MULTI_RELEASE,
    )
    entries = merged_entries(tmp_path, plain, base, later)
    assert entries["m/M.class"] == "M" and entries["META-INF/versions/11/m/M.class"] == "M for 11"
    assert entries["META-INF/versions/11/m/Only.class"] == "only versioned"
    # A later jar's versions of a class an earlier jar gave would replace it: they are left out,
    # as is what a jar without Multi-Release holds under META-INF/versions.
    assert "META-INF/versions/17/m/M.class" not in entries
    assert entries["p/P.class"] == "P" and "META-INF/versions/11/p/P.class" not in entries


def test_a_merged_jar_serves_classes_resources_and_services_to_a_jvm(tmp_path):
    """Compiled and run: the JVM reads the merged (zip64: over 65,535 entries) jar as the class
    path of the two jars it replaces."""
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "Main.java").write_text("""
public class Main {
    public static void main(String[] args) throws Exception {
        for (Runnable service : java.util.ServiceLoader.load(Runnable.class)) service.run();
        System.out.println(new String(Main.class.getResourceAsStream("/note.txt").readAllBytes()));
    }
}
""")
    for name in ("Hello", "World"):
        (sources / f"{name}.java").write_text(
            f'public class {name} implements Runnable {{ public void run() {{ System.out.println("{name}"); }} }}'
        )
    subprocess.run(
        ["javac", "-d", str(sources), *map(str, sources.glob("*.java"))], check=True, timeout=120
    )
    first = tmp_path / "first.jar"
    with zipfile.ZipFile(first, "w") as archive:
        for name in ("Main.class", "Hello.class"):
            archive.writestr(name, (sources / name).read_bytes())
        archive.writestr("META-INF/services/java.lang.Runnable", "Hello")
        archive.writestr("note.txt", "from the first jar")
    second = tmp_path / "second.jar"
    with zipfile.ZipFile(second, "w") as archive:
        archive.writestr("World.class", (sources / "World.class").read_bytes())
        archive.writestr("META-INF/services/java.lang.Runnable", "World\n")
        archive.writestr("note.txt", "from the second jar")
        for number in range(70_000):
            archive.writestr(f"filler/F{number}.txt", "")
    target = tmp_path / "merged.jar"
    assert class_path_jar.merge([first, second], target) > 65_535
    ran = subprocess.run(
        ["java", "-cp", str(target), "Main"], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["Hello", "World", "from the first jar"]


def test_the_merged_jar_lives_alone_in_a_spark_home_named_for_its_jars(tmp_path, monkeypatch):
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "jars"))
    one = jar(tmp_path / "one.jar", {"o/O.class": "O"})
    two = jar(tmp_path / "two.jar", {"t/T.class": "T"})
    said = []
    built = class_path_jar.build(said.append, jars=[one, two])
    home = class_path_jar.spark_home([one, two])
    assert built == home / "jars" / class_path_jar.JAR_NAME and [
        path.name for path in built.parent.iterdir()
    ] == [class_path_jar.JAR_NAME]
    assert (home / "bin" / "spark-submit").is_file()  # pyspark's launcher scripts
    assert "built unit class path" in said[0]
    assert class_path_jar.build(said.append, jars=[one, two]) == built and "present" in said[1]

    jar(
        two, {"t/T.class": "T, updated", "t/U.class": "U"}
    )  # a jar changed: another home, the old one gone
    rebuilt = class_path_jar.build(said.append, jars=[one, two])
    assert rebuilt.parent.parent != home and not home.exists()
    assert not list(rebuilt.parent.parent.parent.glob("*.partial"))

    rebuilt.unlink()  # a home whose jar is gone is built again over what is left of it
    assert class_path_jar.build(said.append, jars=[one, two]) == rebuilt and rebuilt.is_file()


def test_without_the_merged_jar_the_jvms_start_on_the_jars_themselves(tmp_path, monkeypatch):
    from compute.build import class_archive
    from compute.host import spark_session
    from compute.host.spark_session import unit_jars

    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path))
    for module in (class_path_jar, spark_session):
        monkeypatch.setattr(module, "jar_paths", lambda: [Path("/j/a.jar")])
    assert class_path_jar.class_path_jar() is None
    assert class_archive.raydp_class_path().split(":")[0] == "/j/a.jar"
    assert unit_jars() == [Path("/j/a.jar")]


def test_a_units_raydp_session_takes_the_merged_jar_and_a_local_session_the_jars_themselves():
    """The merged jar holds Ray's and RayDP's jars too, whose logging settings a local session's
    driver (plain `local[2]` in bench/, the archive's fallback training) would then find first."""
    from compute.host.spark_session import spark_conf, unit_jars

    merged = class_path_jar.class_path_jar()
    assert merged is not None, "setup builds it: python -m compute.build.class_archive_build"
    assert unit_jars() == [merged]
    assert spark_conf()["spark.driver.extraClassPath"] == ":".join(map(str, jars.jar_paths()))
