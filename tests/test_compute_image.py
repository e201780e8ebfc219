"""The compute units' image (compute/Dockerfile) carries what `compute/` needs, at the versions
pyproject.toml pins. It cannot be built here (no Docker engine), so its text is checked."""

from __future__ import annotations

import re

from app.config import SETTINGS
from tests.deploy_files import DOCKERFILE, PYPROJECT, image_pins, pins


def test_the_image_pins_what_pyproject_pins():
    project = pins(PYPROJECT["project"]["dependencies"])
    image = image_pins()
    # What compute/ imports on a node.
    assert {"ray", "raydp", "pyspark", "pyiceberg", "httpx"} <= image.keys()
    assert {name: version for name, version in image.items() if project.get(name) != version} == {}


def test_the_base_image_is_the_pinned_ray_on_the_projects_python():
    (base,) = re.findall(r"^FROM\s+(\S+)", DOCKERFILE, re.MULTILINE)
    python = re.search(r"<3\.(\d+)", PYPROJECT["project"]["requires-python"]).group(1)
    assert (
        base
        == f"rayproject/ray:{pins(PYPROJECT['project']['dependencies'])['ray']}-py3{int(python) - 1}"
    )


def test_the_image_holds_a_jdk_the_jars_and_the_compute_package():
    assert "openjdk-17-jdk-headless" in DOCKERFILE  # javac too: the S3A jar is built in the image
    assert re.search(r"^COPY (--chown=\S+ )?compute \./compute$", DOCKERFILE, re.MULTILINE)
    assert re.search(
        r"^RUN python scripts/fetch_jars\.py\n(#.*\n)*RUN python -m compute\.build\.class_archive_build$",
        DOCKERFILE,
        re.MULTILINE,
    )
    assert "ENV LAKEPORT_JARS_DIR=" in DOCKERFILE and "ENV PYTHONPATH=/srv/lakeport" in DOCKERFILE
    assert not re.search(
        r"^COPY (--chown=\S+ )?(app|devstack)\b", DOCKERFILE, re.MULTILINE
    )  # compute/ never imports them


def test_kuberay_units_default_to_this_image_at_the_projects_version():
    tag = re.search(r"docker build -f compute/Dockerfile -t (\S+) \.", DOCKERFILE).group(1)
    assert (
        SETTINGS["KUBERAY_IMAGE"].default
        == tag
        == f"lakeport/compute:{PYPROJECT['project']['version']}"
    )
