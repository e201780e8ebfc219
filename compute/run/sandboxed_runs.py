"""A run of a workflow another user wrote: a fresh process in a sandbox of its own, with a Spark of
its own, ended with the run.

When bob runs alice's workflow (shared with him to run), alice's code runs with bob's run token.
In the unit's warm host it could read that token from the host's memory, patch the host's modules
to take the tokens of bob's later runs, read the other warehouses' catalog bindings the host keeps,
or reach the warm JVM. So such a run gets nothing of the warm host:

- a process spawned (not forked: nothing of the host's memory or Python objects) with only this
  run's code and spec, over a socket pair (compute/run/run_channel.py);
- a local-mode Spark session of its own (`local[N]`, the unit's own jars: `spark_session.spark_conf`),
  in the process's own JVM: the warm JVM, its py4j gateway and its Spark driver's RPC stay out of
  reach;
- a nested bubblewrap sandbox: its own user, PID, network, IPC and UTS namespaces (no process of
  the unit to see, signal or trace: no /proc at all, which a nested sandbox could not mount anyway,
  see `sandbox_argv`), a fresh /tmp, the unit's read-only files (interpreter, venv, jars,
  `compute/`) and none of the unit's directory but its egress sockets: inside, the same socat
  bridges the unit's own sandbox runs (TCP-LISTEN -> the unit's egress Unix socket) give it the
  catalog and the allowed endpoints (S3), and nothing else: no port of the unit's;
- `--die-with-parent`: the sandbox ends with the run's thread in the host, and every process of
  it with the sandbox (its PID namespace).

Where a unit cannot make such a sandbox (no egress plan: existing and KubeRay units; nested user
namespaces refused), the run is refused with the reason (`sandbox_problem`), never run without.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

# The unit's plan (app/ray_clusters/local.py writes it, compute/node/unit_init.py reads it) names the
# egress bridges a local unit's sandbox runs; HOME is the unit's directory there.
UNIT_PLAN = "plan.json"
# The `compute` package (this module is compute/run/sandboxed_runs.py), which the run imports.
COMPUTE_PACKAGE = Path(__file__).resolve().parents[1]
# What a failed start of a run's process shows of its stderr.
STDERR_TAIL_BYTES = 2000
_NESTED_NAMESPACES = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--die-with-parent",
    "--new-session",
]


def egress_forwarders(unit_dir: Path) -> list[list[str]] | None:
    """The unit's egress bridges as its plan runs them inside its sandbox (TCP-LISTEN on the
    allowed endpoint's inside address -> the egress Unix socket), or None without a plan."""
    try:
        plan = json.loads((unit_dir / UNIT_PLAN).read_text())
    except (OSError, ValueError):
        return None
    forwarders = [
        argv
        for argv in plan.get("forwarders", [])
        if isinstance(argv, list)
        and any(str(part).startswith("TCP-LISTEN:") for part in argv)
        and any(str(part).startswith("UNIX-CONNECT:") for part in argv)
    ]
    return [[str(part) for part in argv] for argv in forwarders]


def _egress_sockets(forwarders: list[list[str]]) -> list[Path]:
    return [
        Path(part.split(":", 1)[1])
        for argv in forwarders
        for part in argv
        if part.startswith("UNIX-CONNECT:")
    ]


def _java_home() -> Path | None:
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"]).resolve()
    java = shutil.which("java")
    return Path(java).resolve().parents[1] if java else None


def read_only_paths() -> list[Path]:
    """What the run's process reads: the interpreter and the venv, the jars and `compute/` (as the
    unit's own sandbox binds them), the JDK."""
    from compute.build.jars import jars_dir

    paths = [
        Path(sys.base_prefix).resolve(),
        Path(sys.prefix).resolve(),
        jars_dir().resolve(),
        COMPUTE_PACKAGE,
    ]
    if (java_home := _java_home()) is not None:
        paths.append(java_home)
    return [path for path in dict.fromkeys(paths) if path.exists()]


def sandbox_argv(forwarders: list[list[str]], command: list[str]) -> list[str]:
    """The nested bwrap command line. No /proc: the unit's /proc has bwrap's read-only mounts over
    parts of it, so the kernel refuses a new proc mount in a nested namespace (EPERM), and binding
    the unit's /proc would show its processes (a JVM of the same uid is readable through
    /proc/<pid>/mem). Java finds its libraries through LD_LIBRARY_PATH instead of /proc/self/exe."""
    argv = ["bwrap", *_NESTED_NAMESPACES, "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        path = Path("/", name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += [
        "--ro-bind",
        "/etc",
        "/etc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
    ]
    for path in read_only_paths():
        if not str(path).startswith(("/usr/", "/etc/")):
            argv += ["--ro-bind", str(path), str(path)]
    for path in _egress_sockets(forwarders):
        argv += ["--bind", str(path), str(path)]
    argv += ["--clearenv"]
    for key, value in _environment().items():
        argv += ["--setenv", key, value]
    return argv + ["--chdir", "/tmp", "--", *command]


def _environment() -> dict[str, str]:
    """An allow-list: nothing of the host's (its key, Ray's token path) reaches the run."""
    from compute.build.jars import JARS_DIR_ENV, jars_dir

    java_home = _java_home()
    env = {
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "PYTHONPATH": str(COMPUTE_PACKAGE.parent),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "localhost",
        JARS_DIR_ENV: str(jars_dir().resolve()),
    }
    if java_home is not None:
        env["JAVA_HOME"] = str(java_home)
        env["LD_LIBRARY_PATH"] = str(java_home / "lib")
    return env


@functools.cache
def sandbox_problem(unit_dir: str) -> str | None:
    """Why this unit cannot run another author's code in a sandbox of its own, or None (probed once)."""
    forwarders = egress_forwarders(Path(unit_dir))
    if forwarders is None:
        return (
            "a workflow another user wrote runs in a sandbox of its own, which only local compute units "
            "make: this unit has no sandbox plan to give it the catalog and storage (run it on a local unit)"
        )
    if shutil.which("bwrap") is None:
        return "a workflow another user wrote runs in a sandbox of its own, and bwrap is not installed on this unit"
    try:
        done = subprocess.run(
            sandbox_argv(forwarders, [sys.executable, "-c", "pass"]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"a workflow another user wrote runs in a sandbox of its own, which this unit could not make: {error}"
    if done.returncode != 0:
        return (
            "a workflow another user wrote runs in a sandbox of its own, which this unit could not make "
            f"(nested namespaces refused?): {(done.stderr or done.stdout).strip()[:300]}"
        )
    return None


class SandboxedRun:
    """One run's sandboxed process, seen from the host."""

    def __init__(self, unit_dir: Path, session: dict) -> None:
        from compute.run.run_channel import Channel

        forwarders = egress_forwarders(unit_dir) or []
        ours, theirs = socket.socketpair()
        # Its end keeps its number in the process (bwrap passes descriptors on as it gets them).
        settings = {"forwarders": forwarders, "channel_fd": theirs.fileno(), **session}
        command = [sys.executable, "-m", "compute.run.sandboxed_runs", json.dumps(settings)]
        self.process = subprocess.Popen(
            sandbox_argv(forwarders, command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.channel = Channel(ours)
        self._stderr = b""
        threading.Thread(target=self._keep_stderr_tail, daemon=True).start()

    def _keep_stderr_tail(self) -> None:
        for line in self.process.stderr:
            self._stderr = (self._stderr + line)[-STDERR_TAIL_BYTES:]

    def stderr_tail(self) -> str:
        """The end of what the run's process wrote to its stderr (Spark's and Python's own errors)."""
        return self._stderr.decode(errors="replace")

    def cancel(self) -> None:
        try:
            self.channel.send({"kind": "cancel"})
        except OSError:
            pass

    def end(self, grace_s: float = 0.0) -> None:
        """End the sandbox (every process in it) and reap it."""
        try:
            self.process.wait(grace_s) if grace_s else None
        except subprocess.TimeoutExpired:
            pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.channel.close()


# ------------------------------------------------------------------ inside the sandbox
SPARK_SUBMIT = "--spark-submit"


def _spark_submit(args: list[str]) -> None:
    """pyspark's `bin/spark-submit` without its shell's process substitution (`/dev/fd`, which needs
    the /proc the sandbox does not have): Spark's launcher builds the driver's command, exec'd here."""
    import pyspark

    home = str(Path(pyspark.__file__).resolve().parent)
    env = {**os.environ, "SPARK_HOME": home, "SPARK_SCALA_VERSION": "2.12", "PYTHONHASHSEED": "0"}
    java = str(Path(env["JAVA_HOME"]) / "bin" / "java") if env.get("JAVA_HOME") else "java"
    built = subprocess.run(
        [
            java,
            "-Xmx128m",
            "-cp",
            f"{home}/jars/*",
            "org.apache.spark.launcher.Main",
            "org.apache.spark.deploy.SparkSubmit",
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
    )
    command = [part.decode() for part in built.stdout.split(b"\0\n", 1)[-1].split(b"\0") if part]
    if built.returncode != 0 or not command:
        sys.exit(built.returncode or 1)
    os.execve(command[0], command, env)


def _local_session(cores: int, memory: str):
    from pyspark.sql import SparkSession

    from compute.host.spark_session import spark_conf

    # pyspark starts the driver's JVM through $SPARK_HOME/bin/spark-submit: this one.
    shim = Path("/tmp/spark-submit-shim/bin/spark-submit")
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(
        f'#!/bin/sh\nexec {sys.executable} -m compute.run.sandboxed_runs {SPARK_SUBMIT} "$@"\n'
    )
    shim.chmod(0o755)
    os.environ["SPARK_HOME"] = str(shim.parent.parent)
    builder = SparkSession.builder.master(f"local[{cores}]").appName("lakeport-sandboxed-run")
    conf = spark_conf()
    conf.update(
        {
            "spark.driver.memory": memory,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.local.dir": "/tmp",
            "spark.jars.ivy": "/tmp/ivy",
            "spark.driver.extraJavaOptions": f"{conf['spark.driver.extraJavaOptions']} -Duser.home=/tmp",
        }
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def main(settings: dict) -> None:
    from compute.run.run_channel import Channel, RemoteProgress, execute, listen

    # Its own bridges first: the catalog and storage as the unit reaches them, nothing else.
    bridges = [
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for argv in settings["forwarders"]
    ]
    channel = Channel(socket.socket(fileno=int(settings["channel_fd"])))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    run = channel.receive()
    progress = RemoteProgress(channel)
    try:
        spark = _local_session(int(settings.get("cores", 1)), str(settings.get("memory", "1g")))
    except Exception as error:  # noqa: BLE001 - reported as the run's failure
        channel.send(
            {
                "kind": "end",
                "outcome": "failed",
                "error": f"the run's own Spark session failed to start: "
                f"{type(error).__name__}: {str(error)[:500]}",
            }
        )
        os._exit(1)
    threading.Thread(
        target=listen,
        args=(channel, progress, spark, run["run_id"], lambda: os._exit(1)),
        daemon=True,
    ).start()
    execute(channel, spark, run, progress)
    for bridge in bridges:
        bridge.kill()
    os._exit(0)  # lingering threads end with the process; the sandbox ends with it


if __name__ == "__main__":
    if sys.argv[1] == SPARK_SUBMIT:
        _spark_submit(sys.argv[2:])
    else:
        main(json.loads(sys.argv[1]))
