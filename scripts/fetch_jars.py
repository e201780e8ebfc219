"""Fetch the jars Spark needs (Iceberg runtime, S3A) into .cache/jars or $LAKEPORT_JARS_DIR.

Idempotent: jars already present are kept. See compute/build/jars.py for where they come from.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compute.build.jars import fetch_jars  # noqa: E402

if __name__ == "__main__":
    fetch_jars()
