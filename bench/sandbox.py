"""What a local unit's sandbox costs a run: the same catalog and storage requests made by code on
the unit (through the sandbox's loopback bridges) and by the benchmark's own process (straight
to the services), interleaved, with the same token and vended keys.

The bridges (socat, app/ray_clusters/sandbox.py) fork a relay per connection, so a new
connection costs more inside than a request on a kept one. `per run` adds up what a warm run
makes through them: RUN_NEW_CONNECTIONS new connections and RUN_REQUESTS requests, each at
the added cost measured here. Target: the sandbox adds at most a tenth of the warm target to a
run. Beside it, not in the target: how fast a 64 MiB object is read from storage on the unit and
outside (a run that reads a large table streams it through a bridge).
"""

from __future__ import annotations

from bench.harness import Bench, Summary, median, verdict
from compute.contract import RESULTS, table_name

NAME = "sandbox"
REPEATS = 15
# New connections per warm run through a bridge: pyiceberg's catalog session (up to 3 side by
# side), the S3 clients of the result, stats and logs tables (3), the portal's submit and watch (2).
RUN_NEW_CONNECTIONS = 8
# Requests per warm run through a bridge: about 11 to the catalog (config, namespace, two record
# tables, Spark's create and commit, load, three commits at the end), 10 to S3 (the data files,
# manifests and manifest lists of the result and the two record tables) and 3 to the Spark host.
RUN_REQUESTS = 24
TARGET_PER_RUN_S = 0.03

# Run on the unit (as a Spark host run) and here: medians in ms of each request kind.
PROBE_CODE = r"""
import http.client, statistics, time, urllib.parse
from compute.run.iceberg_rest import rest_catalog

catalog = args["catalog"]
url = urllib.parse.urlparse(catalog["uri"])
headers = {"Authorization": "Bearer " + catalog["token"]}
config_path = url.path + "/v1/config?warehouse=" + urllib.parse.quote(catalog["warehouse"])
iceberg = rest_catalog("sandbox-probe", catalog["uri"], catalog["warehouse"], catalog["token"])
table = iceberg.load_table(args["table"])
payload = b"x" * 3000
BULK_BYTES = 64 << 20
bulk_path = f"{table.metadata.location}/data/sandbox-probe-bulk-{time.time_ns()}"
with table.io.new_output(bulk_path).create(overwrite=True) as out:
    out.write(b"\x5a" * BULK_BYTES)
table.io.wait_for_uploads()

def config_on_a_new_connection(i):
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    connection.request("GET", config_path, headers=headers)
    connection.getresponse().read()
    connection.close()

kept = http.client.HTTPConnection(url.hostname, url.port, timeout=10)

def config_on_a_kept_connection(i):
    kept.request("GET", config_path, headers=headers)
    kept.getresponse().read()

def s3_put_3_kb(i):
    path = f"{table.metadata.location}/data/sandbox-probe-{time.time_ns()}"
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(payload)
    table.io.wait_for_uploads()  # the unit's FileIO stores a closed file on an upload thread

def s3_get_metadata(i):
    with table.io.new_input(table.metadata_location).open() as stream:
        stream.read()

def s3_get_64_mib(i):
    with table.io.new_input(bulk_path).open() as stream:
        while stream.read(1 << 20):
            pass

def timed(probe, repeats):
    seconds = []
    for i in range(repeats):
        began = time.perf_counter()
        probe(i)
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds) * 1000

result = {probe.__name__: timed(probe, args["repeats"]) for probe in (
    config_on_a_new_connection, config_on_a_kept_connection, s3_put_3_kb, s3_get_metadata)}
result["bulk_read_ms"] = timed(s3_get_64_mib, 3)
table.io.delete(bulk_path)
kept.close()
"""


def run(bench: Bench, options) -> Summary:
    print(
        f"\n== sandbox: the same requests from code on the unit (through its bridges) and from outside, "
        f"medians of {REPEATS}"
    )
    cu_id = bench.compute_unit_id()
    bench.wait_until_spark_ready(cu_id)
    # A result table of the warehouse to load (its location is where the probe writes).
    workflow_id = bench.create_workflow(
        "bench-sandbox", [{"name": "probe", "kind": "sql", "code": "SELECT 1 AS x", "output": True}]
    )
    execution_id = bench.run(workflow_id, cu_id).execution_id
    args = {
        **bench._catalog_args(),
        "table": table_name(RESULTS, execution_id, "probe"),
        "repeats": REPEATS,
    }
    inside, outside = [], []
    for _ in range(2):  # interleaved
        with bench.spark_host(cu_id) as host:
            run_ = host.wait(
                host.probe(PROBE_CODE, args, name="bench-sandbox")["run_id"], timeout_s=300
            )
        if run_["state"] != "COMPLETED":
            raise RuntimeError(f"the probe on the unit ended {run_['state']}: {run_['error']}")
        inside.append(run_["result"])
        namespace = {"args": args}
        exec(compile(PROBE_CODE, "<sandbox probe>", "exec"), namespace)
        outside.append(namespace["result"])
    bulk = {
        where: median([r.pop("bulk_read_ms") for r in results])
        for where, results in (("unit", inside), ("here", outside))
    }
    added = {}
    for name in inside[0]:
        unit, here = median([r[name] for r in inside]), median([r[name] for r in outside])
        added[name] = unit - here
        print(
            f"  {name.replace('_', ' ')}: on the unit {unit:.1f} ms, outside {here:.1f} ms "
            f"({unit - here:+.1f} ms, {unit / here:.2f}×)"
        )
    per_request_ms = max(
        0.0, median([added[name] for name in added if name != "config_on_a_new_connection"])
    )
    per_run_s = (
        max(0.0, added["config_on_a_new_connection"]) * RUN_NEW_CONNECTIONS
        + per_request_ms * RUN_REQUESTS
    ) / 1000
    print(
        f"  s3 get 64 MiB: on the unit {bulk['unit']:.0f} ms ({64 / bulk['unit'] * 1000:.0f} MiB/s), outside "
        f"{bulk['here']:.0f} ms ({64 / bulk['here'] * 1000:.0f} MiB/s), {bulk['unit'] / bulk['here']:.2f}×"
    )
    met = per_run_s <= TARGET_PER_RUN_S
    print(
        f"  per warm run ({RUN_NEW_CONNECTIONS} new connections and {RUN_REQUESTS} requests through a bridge, "
        f"{per_request_ms:+.1f} ms a request): {per_run_s * 1000:.0f} ms "
        f"(target ≤ {TARGET_PER_RUN_S * 1000:.0f} ms, a tenth of the warm target): {verdict(met)}"
    )
    return Summary(
        NAME,
        f"{per_run_s * 1000:.0f} ms per warm run ({added['config_on_a_new_connection']:+.1f} ms "
        f"per new connection, {per_request_ms:+.1f} ms per request on a kept one; "
        f"target ≤ {TARGET_PER_RUN_S * 1000:.0f} ms)",
        met,
    )
