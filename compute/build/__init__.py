"""Built at setup, never by a unit: what a unit's Spark JVMs start from (`scripts/setup.sh`,
`scripts/fetch_jars.py`, the compute image). Units only read it.

- `jars.py` — fetches the jars Spark needs and builds Lakeport's own from `compute/java/`
- `class_path_jar.py` — the JVMs' class path merged into one jar
- `class_archive.py` — the JDK class-data-sharing archive the Spark JVMs start from
- `class_archive_build.py` — builds that archive from a training session
"""
