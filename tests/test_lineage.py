"""Lineage, pinned re-runs and comparisons on a real compute unit (Ray + RayDP + Spark), writing
through the dev catalog into SeaweedFS; every figure checked with an independent pyiceberg client.
Heavy: run under `flock /tmp/lakeport-heavy.lock`."""

from __future__ import annotations

import json

import pyarrow as pa

from compute.contract import JobKind
from tests.catalogs import reader, spec_for, step, submit

PEOPLE = pa.schema([("id", pa.int64()), ("name", pa.string()), ("nation", pa.int64())])
NATION = pa.schema([("n_nationkey", pa.int64()), ("n_name", pa.string())])

# Step one (SQL) reads the uploaded dataset, step two (Python) a TPC-H table through spark.table.
TWO_STEPS = [
    step("people", "SELECT id, name, nation FROM datasets.people WHERE id > 0", output=True),
    step(
        "named",
        "def run(spark, people):\n"
        "    nations = spark.table('tpch.nation')\n"
        "    return people.join(nations, people.nation == nations.n_nationkey).select('id', 'name', 'n_name')",
        kind="python",
        output=True,
    ),
]


def rows(catalog, table: str) -> list[dict]:
    return sorted(
        catalog.load_table(table).scan().to_arrow().to_pylist(), key=lambda row: row["id"]
    )


def run(host, lakehouse, warehouse, steps, **overrides) -> tuple[dict, int]:
    run_id, spec = submit(host, lakehouse, warehouse, steps, **overrides)
    return host.wait(run_id, timeout_s=180), spec["execution_id"]


def test_lineage_pinned_reruns_and_a_comparison(host, lakehouse, warehouses):
    warehouse = warehouses[0]
    catalog = reader(lakehouse, warehouse)
    catalog.create_namespace_if_not_exists("tpch")
    people = catalog.create_table("datasets.people", schema=PEOPLE)
    people.append(
        pa.table(
            {"id": [1, 2, 3], "name": ["ann", "bob", "cy"], "nation": [0, 1, 1]}, schema=PEOPLE
        )
    )
    nation = catalog.create_table("tpch.nation", schema=NATION)
    nation.append(
        pa.table({"n_nationkey": [0, 1], "n_name": ["ALGERIA", "ARGENTINA"]}, schema=NATION)
    )

    first, first_id = run(host, lakehouse, warehouse, TWO_STEPS)
    assert first["state"] == "COMPLETED", first["error"]
    lineage = first["result"]["lineage"]

    # Reads: both inputs at the snapshot an independent client sees as current (nothing wrote since).
    people, nation = catalog.load_table("datasets.people"), catalog.load_table("tpch.nation")
    read = {entry["table"]: entry for entry in lineage["read"]}
    assert set(read) == {"datasets.people", "tpch.nation"}
    for table in (people, nation):
        name = ".".join(table.name()[-2:])
        snapshot = table.current_snapshot()
        assert read[name]["snapshot_id"] == snapshot.snapshot_id
        assert read[name]["snapshot_at_ms"] == snapshot.timestamp_ms
        assert read[name]["total_records"] == int(snapshot.summary["total-records"])
    # Writes: each output's committed snapshot with its summary's figures.
    wrote = {entry["step"]: entry for entry in lineage["wrote"]}
    assert set(wrote) == {"people", "named"}
    for step_name, records in (("people", 3), ("named", 3)):
        table = catalog.load_table(f"results.e{first_id}_{step_name}")
        history = [entry.snapshot_id for entry in table.history()]
        assert wrote[step_name]["snapshot_id"] in history
        summary = table.snapshot_by_id(wrote[step_name]["snapshot_id"]).summary
        assert wrote[step_name]["added_records"] == int(summary["added-records"]) == records
        assert wrote[step_name]["added_files"] == int(summary["added-data-files"]) > 0
        assert wrote[step_name]["added_bytes"] == int(summary["added-files-size"]) > 0
    # runtime_stats has each step's part.
    stats = {
        row["step"]: json.loads(row["lineage"])
        for row in catalog.load_table(f"runtime_stats.e{first_id}").scan().to_arrow().to_pylist()
    }
    assert [entry["table"] for entry in stats["people"]["read"]] == ["datasets.people"]
    assert [entry["table"] for entry in stats["named"]["read"]] == [
        "tpch.nation"
    ]  # not its own result table
    assert stats["named"]["wrote"] == [wrote["named"]]

    # The dataset is replaced; the nation table gains a row.
    catalog.load_table("datasets.people").overwrite(
        pa.table({"id": [1, 4], "name": ["ann", "dee"], "nation": [0, 2]}, schema=PEOPLE)
    )
    catalog.load_table("tpch.nation").append(
        pa.table({"n_nationkey": [2], "n_name": ["BRAZIL"]}, schema=NATION)
    )
    pins = {entry["table"]: entry["snapshot_id"] for entry in lineage["read"]}

    pinned, pinned_id = run(host, lakehouse, warehouse, TWO_STEPS, pinned=pins)
    assert pinned["state"] == "COMPLETED", pinned["error"]
    assert {e["table"]: e["snapshot_id"] for e in pinned["result"]["lineage"]["read"]} == pins
    fresh, fresh_id = run(host, lakehouse, warehouse, TWO_STEPS)
    assert fresh["state"] == "COMPLETED", fresh["error"]
    for step_name in ("people", "named"):
        original = [
            {k: v for k, v in row.items()}
            for row in rows(catalog, f"results.e{first_id}_{step_name}")
        ]
        assert rows(catalog, f"results.e{pinned_id}_{step_name}") == original
        assert rows(catalog, f"results.e{fresh_id}_{step_name}") != original
    assert rows(catalog, f"results.e{fresh_id}_named") == [
        {"id": 1, "name": "ann", "n_name": "ALGERIA"},
        {"id": 4, "name": "dee", "n_name": "BRAZIL"},
    ]

    # The comparison of the first and the fresh run: exactly the rows that differ, both ways.
    spec = spec_for(warehouse, lakehouse.service_token(), [], f"{lakehouse.catalog_url}/catalog")
    compare_id = host.submit(
        JobKind.COMPARISON,
        {
            "catalog": spec["catalog"],
            "warehouse": spec["warehouse"],
            "limit": 50,
            "pairs": [
                {
                    "output": "named",
                    "a": f"results.e{first_id}_named",
                    "b": f"results.e{fresh_id}_named",
                }
            ],
        },
    )["run_id"]
    comparison = host.wait(compare_id, timeout_s=120)
    assert comparison["state"] == "COMPLETED", comparison["error"]
    named = comparison["result"]["named"]
    assert sorted(named["only_in_a"], key=lambda r: r["id"]) == [
        {"id": 2, "name": "bob", "n_name": "ARGENTINA"},
        {"id": 3, "name": "cy", "n_name": "ARGENTINA"},
    ]
    assert named["only_in_b"] == [{"id": 4, "name": "dee", "n_name": "BRAZIL"}]
    assert named["only_in_a_count"] == 2 and named["only_in_b_count"] == 1

    # A pinned snapshot that no longer exists: the run fails naming the table and the snapshot.
    old = pins["datasets.people"]
    catalog.load_table("datasets.people").maintenance.expire_snapshots().by_id(old).commit()
    expired, _ = run(host, lakehouse, warehouse, TWO_STEPS, pinned=pins)
    assert expired["state"] == "FAILED"
    assert (
        f"the pinned snapshot {old} of table datasets.people no longer exists" in expired["error"]
    )
