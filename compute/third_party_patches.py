"""Every patch of a third-party internal, in one place, each guarded by the version it was
written against.

Lakeport changes how RayDP, Ray and pyspark's py4j client work in a few places, through their
internals, which change without notice between versions. So each patch first checks that the
installed distribution is the one pinned (`PINS`: pyproject.toml and compute/Dockerfile pin the
same) and fails loudly otherwise (`UnpinnedVersion`), and `TARGETS` lists what each patch
reaches, which tests/test_compute_patches.py checks is still there.

- `import_raydp` — RayDP: `import raydp` with its dataset conversions imported on first use.
- `run_raydp_app_master_in_the_driver` — RayDP: its app master held in the Spark driver's JVM.
- `start_ray_node_lean` — Ray: `ray start` without the processes a unit does not use.
- `fresh_py4j_client_after_fork` — py4j (pyspark's): a forked child's own JVM connections.

Importing this module imports none of them: each patch imports what it patches.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import os
import re
import sys
import threading
import types
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The versions every patch here was written against and checked with.
PINS = {"raydp": "1.6.5", "ray": "2.60.0", "pyspark": "3.5.7", "py4j": "0.10.9.7"}


class UnpinnedVersion(RuntimeError):
    """A patched distribution is not at the version its patches were written against."""


@functools.cache
def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def require_pinned(*distributions: str) -> None:
    """Raise UnpinnedVersion unless each distribution is installed at its pinned version."""
    for distribution in distributions:
        pinned, installed = PINS[distribution], installed_version(distribution)
        if installed != pinned:
            found = f"{installed} is installed" if installed else "it is not installed"
            raise UnpinnedVersion(
                f"compute/third_party_patches.py patches internals of {distribution}=={pinned}, "
                f"but {found}: check each of its TARGETS against that version, then move the pin "
                "here, in pyproject.toml and in compute/Dockerfile together"
            )


@dataclass(frozen=True)
class Target:
    """What a patch reaches: `path` in `module` (attributes, dotted), with the parameters it
    passes or takes, and the attributes its `__init__` sets (for an object whose state is reset)."""

    distribution: str
    module: str
    path: str
    parameters: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()


RAYDP_DATASETS = "raydp.spark.dataset"
_RAYDP_DATASET_CLASSES = ("PartitionObjectsOwner",)
_RAYDP_DATASET_FUNCTIONS = (
    "get_raydp_master_owner",
    "spark_dataframe_to_ray_dataset",
    "ray_dataset_to_spark_dataframe",
    "from_spark_recoverable",
    "release_spark_recoverable",
)
_RAYDP_MASTER = "RayDPSparkMaster.__ray_actor_class__"

TARGETS = (
    # import_raydp
    *(Target("raydp", RAYDP_DATASETS, name) for name in _RAYDP_DATASET_FUNCTIONS),
    *(Target("raydp", RAYDP_DATASETS, name) for name in _RAYDP_DATASET_CLASSES),
    # run_raydp_app_master_in_the_driver
    Target("raydp", "raydp.context", "_SparkContext._get_or_create_spark_cluster"),
    Target(
        "raydp",
        "raydp.context",
        "_SparkContext.__init__",
        sets=("_spark_cluster", "_app_name", "_num_executors", "_executor_cores"),
    ),
    Target("raydp", "raydp.spark", "SparkCluster.__init__", sets=("_spark_session",)),
    Target("raydp", "raydp.spark", "SparkCluster._set_up_master", ("resources", "kwargs")),
    Target("raydp", "raydp.spark", "SparkCluster.get_cluster_url"),
    Target("raydp", "raydp.spark", "SparkCluster.connect_spark_driver_to_ray"),
    Target("raydp", "raydp.spark", "SparkCluster.stop", ("cleanup_data",)),
    Target("raydp", "raydp.spark.ray_cluster_master", f"{_RAYDP_MASTER}._generate_ray_configs"),
    Target("pyspark", "pyspark", "SparkContext._ensure_initialized", ("conf",)),
    Target("pyspark", "pyspark", "SparkContext._jvm"),
    # start_ray_node_lean
    Target("ray", "ray._private.services", "start_ray_process", ("command", "process_type")),
    Target("ray", "ray._private.ray_constants", "PROCESS_TYPE_DASHBOARD"),
    Target("ray", "ray._private.ray_constants", "PROCESS_TYPE_RAYLET"),
    Target("ray", "ray._private.ray_constants", "ENABLE_RAY_CLUSTER"),
    Target("ray", "ray._private.node", "Node.start_ray_client_server"),
    Target(
        "ray",
        "ray._private.node",
        "Node.start_api_server",
        ("include_dashboard", "raise_on_failure"),
    ),
    Target("ray", "ray._private.node", "Node.__init__", ("spawn_reaper",), sets=("_webui_url",)),
    Target("ray", "ray.scripts.scripts", "ray_constants"),
    # fresh_py4j_client_after_fork
    Target("py4j", "py4j.finalizer", "ThreadSafeFinalizer.lock"),
    Target("py4j", "py4j.java_gateway", "GatewayClient.__init__", sets=("deque",)),
    Target(
        "py4j",
        "py4j.clientserver",
        "JavaClient.__init__",
        sets=("thread_connection", "finalizer_deque"),
    ),
)


def missing_targets() -> list[str]:
    """What of TARGETS the installed distributions no longer have, one line each."""
    missing = []
    for target in TARGETS:
        where = f"{target.module}.{target.path}"
        try:
            found: object = importlib.import_module(target.module)
            for name in target.path.split("."):
                found = getattr(found, name)
        except (ImportError, AttributeError) as error:
            missing.append(f"{where}: {error}")
            continue
        if target.parameters:
            parameters = inspect.signature(found).parameters
            if gone := [name for name in target.parameters if name not in parameters]:
                missing.append(f"{where}: no parameter {', '.join(gone)}")
        if target.sets:
            source = inspect.getsource(found)
            assigned = set(re.findall(r"self\.(\w+)\s*(?::[^=\n]+)?=[^=]", source))
            if gone := [name for name in target.sets if name not in assigned]:
                missing.append(f"{where}: sets no {', '.join(gone)}")
    return missing


# ------------------------------------------------------------------------- RayDP
def import_raydp():
    """`import raydp`, with its conversions between Spark and Ray datasets (RAYDP_DATASETS)
    imported on their first use. They import ray.data and pandas, about half a second of a unit's
    way to its session on a fast machine, and a unit's session does not use them (Spark to Ray
    reaches RayDP's app master actor, which a unit does not have)."""
    if (raydp := sys.modules.get("raydp")) is not None:
        return raydp
    require_pinned("raydp")
    stand_in = types.ModuleType(RAYDP_DATASETS)
    for name in _RAYDP_DATASET_FUNCTIONS:
        setattr(stand_in, name, _imported_on_first_call(name))
    for name in _RAYDP_DATASET_CLASSES:
        setattr(stand_in, name, _ClassImportedOnFirstUse(name, (), {"__module__": RAYDP_DATASETS}))
    sys.modules[RAYDP_DATASETS] = stand_in
    try:
        import raydp
    finally:
        if sys.modules.get(RAYDP_DATASETS) is stand_in:
            del sys.modules[RAYDP_DATASETS]  # a later import finds the real module
    return raydp


def _imported_on_first_call(name: str) -> Callable:
    def call(*args, **kwargs):
        return getattr(importlib.import_module(RAYDP_DATASETS), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class _ClassImportedOnFirstUse(type):
    """A stand-in for a class of RAYDP_DATASETS: making an instance, isinstance and issubclass
    import the real module and answer for its class of the same name."""

    def _real(cls) -> type:
        return getattr(importlib.import_module(RAYDP_DATASETS), cls.__name__)

    def __call__(cls, *args, **kwargs):
        return cls._real()(*args, **kwargs)

    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, cls._real())

    def __subclasscheck__(cls, subclass) -> bool:
        return issubclass(subclass, cls._real())


def run_raydp_app_master_in_the_driver(
    app_master_class_path: Callable[[], str], merged_jar
) -> None:
    """Makes `raydp.init_spark` run RayDP's app master inside the Spark driver's own JVM.

    RayDP's way: a master actor (a whole Python worker) launches a JVM of its own, which joins
    Ray and creates the app master, a Ray Java actor in a JVM of its own again; only then does
    the driver's JVM start. Here the driver's JVM (pyspark's gateway, launched with the
    configuration RayDP prepared) joins Ray, which it does anyway for RayDP's object store
    writer, and holds the app master as an object: its RPC endpoint (which executors register
    with) and the executors' Ray actors, which it creates. So a unit's start waits for two JVMs,
    the driver and then the executors, not three one after another, and an idle unit holds one
    JVM fewer. The executors belong to the driver's Ray job, so they end with it. What RayDP
    reached through the app master's actor (its Spark-to-Ray-dataset conversion) is not used.

    `app_master_class_path()`: the class path the app master starts executors with;
    `merged_jar()`: the one jar of the driver's class path (compute/build/class_path_jar.py), or
    None before setup built it."""
    require_pinned("raydp", "pyspark")
    import raydp.context
    from raydp.spark import SparkCluster
    from raydp.spark.ray_cluster_master import RayDPSparkMaster

    class ClusterWithAppMasterInTheDriver(SparkCluster):
        def _set_up_master(self, resources, kwargs):
            self._spark_master_handle = None
            # Only for its class path and Ray settings: it launches nothing here.
            self._master = RayDPSparkMaster.__ray_actor_class__(self._configs)
            self._app_master = None  # RayDP's RayAppMaster, an object in the driver's JVM

        def get_cluster_url(self) -> str:
            if self._app_master is None:
                from pyspark import SparkContext

                _launch_the_drivers_jvm(self._configs, merged_jar())
                jvm = SparkContext._jvm
                jvm.org.apache.spark.deploy.raydp.RayAppMaster.setProperties(
                    self._master._generate_ray_configs()
                )
                jvm.io.ray.api.Ray.init()  # before the context starts: the app master creates executors
                self._app_master = jvm.org.apache.spark.deploy.raydp.RayAppMaster(
                    app_master_class_path()
                )
                self._jvm = jvm
            return self._app_master.getMasterUrl()

        def connect_spark_driver_to_ray(self):
            jvm = self._spark_session._jvm
            jvm.org.apache.spark.sql.raydp.ObjectStoreWriter.connectToRay()  # joined already: the agent only

        def stop(self, cleanup_data):
            if self._spark_session is not None:
                self._spark_session.stop()
                self._spark_session = None
            # Leaving Ray ends the executors' actors. Not waited for, as RayDP's own stop is not
            # (a session that failed to start can leave it blocked).
            if (app_master := self._app_master) is not None:
                self._app_master = None
                threading.Thread(
                    target=_stop_app_master,
                    args=(self._jvm, app_master),
                    name="raydp-app-master-stop",
                    daemon=True,
                ).start()

    class ContextWithAppMasterInTheDriver(raydp.context._SparkContext):
        def _get_or_create_spark_cluster(self) -> SparkCluster:
            if self._spark_cluster is None:
                self._spark_cluster = ClusterWithAppMasterInTheDriver(
                    self._app_name,
                    self._num_executors,
                    self._executor_cores,
                    self._executor_memory,
                    self._enable_hive,
                    self._configs,
                )
            return self._spark_cluster

    raydp.context._SparkContext = ContextWithAppMasterInTheDriver


def _stop_app_master(jvm, app_master) -> None:
    """The app master's RPC endpoint, then the driver's JVM leaves Ray: its executors' actors end."""
    app_master.stop()
    jvm.io.ray.api.Ray.shutdown()


def _launch_the_drivers_jvm(configs: Mapping[str, str], merged) -> None:
    """The driver's JVM (pyspark's gateway), launched as `getOrCreate` would launch it (that call
    reuses it). Its class path is the one merged jar once setup built it: RayDP put its own jars,
    Spark's and Ray's on the driver's, and `spark-submit` adds those of its Spark home, here the
    merged jar's own."""
    from pyspark import SparkConf, SparkContext

    if merged is None:
        SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(configs.items()))
        return
    configs = {**configs, "spark.driver.extraClassPath": str(merged)}
    before = os.environ.get("SPARK_HOME")
    # Read by pyspark's launcher to start spark-submit.
    os.environ["SPARK_HOME"] = str(merged.parent.parent)
    try:
        SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(configs.items()))
    finally:
        if before is None:
            os.environ.pop("SPARK_HOME", None)
        else:
            os.environ["SPARK_HOME"] = before


# ------------------------------------------------------------------------- Ray
def start_ray_node_lean(
    *,
    dashboard_modules: tuple[str, ...],
    agent_command: Callable[[str], str] | None,
    spawn_reaper: bool,
) -> None:
    """Makes `ray start` (in this process) leave out what a unit does not use, and join a worker
    node to a head in loopback mode (compute/node/ray_node.py says why):

    - a dashboard process loads only `dashboard_modules`;
    - `agent_command(arg)` rewrites each of the raylet's arguments (the agents' commands), if given;
    - no Ray Client server, and no API server without the dashboard;
    - with `spawn_reaper`, the node's servers die with this process;
    - the CLI sees a copy of Ray's constants in which multi-node clusters are allowed."""
    require_pinned("ray")
    import ray._private.node as ray_node
    import ray._private.ray_constants as ray_constants
    import ray._private.services as ray_services
    import ray.scripts.scripts as ray_cli

    start_ray_process = ray_services.start_ray_process

    def start_process(command, process_type, *args, **kwargs):
        # `ray start` has no option for the dashboard's modules; its dashboard process has one.
        # With `--include-dashboard=false` Ray names its own (one module, no subprocesses).
        if process_type == ray_constants.PROCESS_TYPE_DASHBOARD and not any(
            arg.startswith("--modules-to-load=") for arg in command
        ):
            command = [*command, f"--modules-to-load={','.join(dashboard_modules)}"]
        # Nothing asks the agents of a unit without a dashboard anything, and no runtime
        # environment is built (no task or actor names one); yet the raylet will not start
        # without both agent commands, and ends when an agent ends.
        if agent_command is not None and process_type == ray_constants.PROCESS_TYPE_RAYLET:
            command = [agent_command(arg) for arg in command]
        return start_ray_process(command, process_type, *args, **kwargs)

    ray_services.start_ray_process = start_process
    # Nothing speaks Ray Client to a unit (the portal talks HTTP to its Spark host), and `ray
    # start` cannot go without its server (a port of 0 is refused): it is never started.
    ray_node.Node.start_ray_client_server = lambda _node: None
    # Without the dashboard Ray still starts its API server, for usage stats alone (which units
    # do not send): about 115 MiB that nothing reads.
    start_api_server = ray_node.Node.start_api_server

    def start_api_server_for_the_dashboard(node, *, include_dashboard, raise_on_failure):
        if include_dashboard is False:
            node._webui_url = None
            return None
        return start_api_server(
            node, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure
        )

    ray_node.Node.start_api_server = start_api_server_for_the_dashboard
    if spawn_reaper:
        # The kernel's parent-death signal, which `ray start --block` asks for too, and which
        # survives an exec: a node killed leaves nothing behind.
        node_init = ray_node.Node.__init__
        ray_node.Node.__init__ = lambda node, *args, **kwargs: node_init(
            node, *args, **{**kwargs, "spawn_reaper": True}
        )

    joinable = types.ModuleType(ray_constants.__name__)
    joinable.__dict__.update(vars(ray_constants))
    joinable.ENABLE_RAY_CLUSTER = True
    ray_cli.ray_constants = joinable


# ------------------------------------------------------------------------- py4j (pyspark's)
def fresh_py4j_client_after_fork(spark) -> None:
    """In a child forked from the warm host: its own py4j connections (made as it calls the JVM)
    and finalizer queue. The inherited connections' sockets are shared with the host, whose
    threads may be using them; a host thread may have held the finalizer's lock at the fork."""
    require_pinned("pyspark", "py4j")
    from py4j.finalizer import ThreadSafeFinalizer

    client = spark.sparkContext._gateway._gateway_client
    client.deque = deque()
    client.thread_connection = threading.local()
    client.finalizer_deque = deque()
    ThreadSafeFinalizer.lock = threading.RLock()
