"""The stack's servers as child processes: started on 127.0.0.1, stopped by PID.

``Processes`` starts every server in its own process group (``start_new_session``) and
records it; ``stop_all`` terminates each group (SIGTERM, then SIGKILL after a bounded
wait), newest first; ``stopped_at_exit`` stops them also when this process is terminated
(SIGTERM) or exits without unwinding. Readiness is polled (a port accepts connections, a
log line appears) with a deadline, never slept for. The stack tests
(``backfill_assets_tests/stack``) and the scale benchmark (``bench_scale``) use them.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"


class StackError(RuntimeError):
    """A server did not come up; the message names it and ends with its log."""


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg2://``) as libpq takes it (``postgresql://``)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _ports_outside_the_ephemeral_range() -> Iterator[int]:
    """Ports no ``bind(0)`` or outgoing connection can be given (the kernel hands those out
    of its ephemeral range): a JVM's py4j gateway or a client's socket cannot take one
    between its choice and the server's bind. From a random one on (processes choosing at
    once start apart), each once."""
    low, high = _ephemeral_range()
    ports = range(max(1024, low - 12000), low) or range(high + 1, 65536)
    start = random.randrange(len(ports))
    return (ports[(start + i) % len(ports)] for i in range(len(ports)))


def _claim(port: int) -> socket.socket | None:
    """A Unix socket bound to a name of ``port`` in Linux's abstract namespace: one per
    machine, gone with its process (no file to clean); None when another holds it."""
    claim = socket.socket(socket.AF_UNIX)
    try:
        claim.bind(f"\0backfill-assets-port-{port}")
    except OSError:
        claim.close()
        return None
    return claim


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    log: Path
    cleanup: Path | None = None  # a temporary directory removed once it is stopped

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Processes:
    """Every process the stack started, for ``stop_all`` (also after a failure)."""

    servers: list[Server] = field(default_factory=list)
    port_claims: list[socket.socket] = field(default_factory=list)  # see free_port

    def free_port(self) -> int:
        """A port on 127.0.0.1 for a server of ours, held until ``stop_all``: outside the
        kernel's ephemeral range, bindable now, and claimed machine-wide (``_claim``) so
        another process of the suite does not choose it too."""
        for port in _ports_outside_the_ephemeral_range():
            claim = _claim(port)
            if claim is None:
                continue
            if _bindable(port):
                self.port_claims.append(claim)
                return port
            claim.close()
        raise StackError(f"no free port on {HOST} outside the ephemeral range")

    def start(
        self,
        name: str,
        args: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        user: str | None = None,
    ) -> Server:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            process = subprocess.Popen(
                list(args),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                user=user,
                start_new_session=True,
            )
        server = Server(name, process, log)
        self.servers.append(server)
        return server

    def wait_until(
        self,
        server: Server,
        ready: Callable[[], bool],
        *,
        what: str,
        timeout: float = 120.0,
        poll: float = 0.2,
    ) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if server.process.poll() is not None:
                raise StackError(
                    f"{server.name} (pid {server.pid}) exited with {server.process.returncode} "
                    f"before {what}; log {server.log}:\n{tail(server.log)}"
                )
            if time.monotonic() > deadline:
                raise StackError(
                    f"{server.name} (pid {server.pid}): no {what} after {timeout:.0f}s; "
                    f"log {server.log}:\n{tail(server.log)}"
                )
            time.sleep(poll)

    def wait_port(self, server: Server, port: int, timeout: float = 120.0) -> None:
        self.wait_until(
            server, lambda: port_open(port), what=f"listener on {HOST}:{port}", timeout=timeout
        )

    def stop(self, server: Server, timeout: float = 20.0) -> None:
        """SIGTERM the server's process group, SIGKILL it if still there after ``timeout``."""
        if server.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, signal.SIGKILL)
                server.process.wait(10)
        # Children that outlived the leader (e.g. Spark executors of a worker).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.pid, signal.SIGKILL)
        if server.cleanup:
            shutil.rmtree(server.cleanup, ignore_errors=True)

    def stop_all(self) -> None:
        while self.servers:
            self.stop(self.servers.pop())
        while self.port_claims:
            self.port_claims.pop().close()


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def stopped_at_exit(processes: Processes) -> Iterator[Processes]:
    """``processes`` stopped (``stop_all``) when the block ends, also when this process is
    terminated (SIGTERM: raised as KeyboardInterrupt in the block) or exits without
    unwinding (``atexit``)."""
    atexit.register(processes.stop_all)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield processes
    finally:
        processes.stop_all()
        signal.signal(signal.SIGTERM, previous)
        atexit.unregister(processes.stop_all)


def postgres_bindir() -> Path:
    """Postgres server binaries: ``pg_config --bindir``, else ``/usr/lib/postgresql/*/bin``."""
    candidates = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        candidates.append(Path(out.stdout.strip()))
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for path in candidates:
        if (path / "initdb").exists() and (path / "postgres").exists():
            return path
    raise StackError(
        "no Postgres server binaries (initdb, postgres) found; install them "
        "(Debian: apt-get install -y postgresql; `make test-stack` does it when root)"
    )


def service_user() -> str | None:
    """Postgres refuses to run as root: run it as ``postgres`` then (None: as ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise StackError("running as root but there is no 'postgres' user") from exc
    return "postgres"


def owned_tempdir(prefix: str, user: str | None) -> Path:
    """A temporary directory the service user owns (pytest's tmp dirs are root-only)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def start_postgres(processes: Processes, logs: Path, databases: Sequence[str]) -> str:
    """Postgres in a fresh temporary cluster on 127.0.0.1; returns its base URL
    (``postgresql+psycopg2://postgres@127.0.0.1:PORT``) with ``databases`` created."""
    import psycopg2

    bindir = postgres_bindir()
    user = service_user()
    root = owned_tempdir("stack-pg-", user)
    data = root / "data"
    init = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        capture_output=True,
        text=True,
        user=user,
        cwd=root,
        timeout=120,
    )
    if init.returncode != 0:
        raise StackError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
    port = processes.free_port()
    server = processes.start(
        "postgres",
        [
            str(bindir / "postgres"),
            "-D",
            str(data),
            "-h",
            HOST,
            "-p",
            str(port),
            "-k",
            str(root),
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
        ],
        log=logs / "postgres.log",
        user=user,
        cwd=root,
    )
    server.cleanup = root

    def accepting() -> bool:  # the port opens before recovery ends ("starting up")
        try:
            psycopg2.connect(host=HOST, port=port, user="postgres", dbname="postgres").close()
        except psycopg2.OperationalError:
            return False
        return True

    processes.wait_until(server, accepting, what="connections accepted", timeout=60)
    conn = psycopg2.connect(host=HOST, port=port, user="postgres", dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        for name in databases:
            cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return f"postgresql+psycopg2://postgres@{HOST}:{port}"


def spark_home() -> Path:
    """The pyspark wheel is a Spark distribution (bin/, jars/): SPARK_HOME is the package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise StackError("no java on PATH and no JAVA_HOME (Spark 4 needs Java 17+)")
    return found


JDBC_JAR_CANDIDATES = ("/usr/share/java/postgresql.jar",)


def jdbc_jar() -> str:
    """PostgreSQL's JDBC driver (Debian: libpostgresql-jdbc-java), or $POSTGRES_JDBC_JAR."""
    for candidate in (os.environ.get("POSTGRES_JDBC_JAR"), *JDBC_JAR_CANDIDATES):
        if candidate and Path(candidate).exists():
            return candidate
    raise StackError(
        "no PostgreSQL JDBC driver: apt-get install -y libpostgresql-jdbc-java "
        "(`make test-stack` does it when root) or set POSTGRES_JDBC_JAR"
    )


def create_metastore_schema(jdbc_url: str, workdir: Path, log: Path) -> None:
    """The Hive metastore schema on Postgres, created up front with DataNucleus' SchemaTool
    from the wheel's jars and the ``package.jdo`` of ``hive-metastore-*.jar`` (letting the
    metastore create it lazily deadlocks on Postgres)."""
    import zipfile

    jars = spark_home() / "jars"
    (metastore_jar,) = sorted(jars.glob("hive-metastore-*.jar"))[-1:]
    workdir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(metastore_jar) as jar:
        (workdir / "package.jdo").write_bytes(jar.read("package.jdo"))
    props = workdir / "datanucleus.properties"
    props.write_text(
        "\n".join(
            [
                f"javax.jdo.option.ConnectionURL={jdbc_url}",
                "javax.jdo.option.ConnectionDriverName=org.postgresql.Driver",
                "javax.jdo.option.ConnectionUserName=postgres",
                "javax.jdo.option.ConnectionPassword=",
                "datanucleus.storeManagerType=rdbms",
                "datanucleus.schema.autoCreateAll=true",
                "datanucleus.identifierFactory=datanucleus1",
                "datanucleus.rdbms.useLegacyNativeValueStrategy=true",
                "",
            ]
        )
    )
    with open(log, "wb") as out:
        result = subprocess.run(
            [
                java(),
                "-cp",
                f"{jars}/*:{jdbc_jar()}",
                "org.datanucleus.store.schema.SchemaTool",
                "-create",
                "-api",
                "JDO",
                "-props",
                str(props),
                str(workdir / "package.jdo"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            timeout=300,
        )
    if result.returncode != 0 or "completed successfully" not in log.read_text(errors="replace"):
        raise StackError(f"SchemaTool failed ({result.returncode}); log {log}:\n{tail(log)}")


def start_metastore(
    processes: Processes,
    logs: Path,
    jdbc_url: str,
    warehouse: str,
    env: Mapping[str, str],
    s3a: Mapping[str, str],
) -> str:
    """The Hive metastore service (``metastore_server.py``); returns its thrift URI.
    ``s3a``: the Spark configuration of the S3A connector (``core.spark.session.s3a_conf``),
    for a warehouse on S3: the service creates the databases' folders there."""
    import sys

    port = processes.free_port()
    options = []
    if s3a.get("spark.driver.extraClassPath"):
        options += ["--classpath", s3a["spark.driver.extraClassPath"]]
    for key, value in s3a.items():
        if key.startswith("spark.hadoop."):
            options += ["--hadoop", f"{key.removeprefix('spark.hadoop.')}={value}"]
    server = processes.start(
        "hive-metastore",
        [
            sys.executable,
            str(Path(__file__).with_name("metastore_server.py")),
            "--port",
            str(port),
            "--jdbc-url",
            jdbc_url,
            "--jdbc-jar",
            jdbc_jar(),
            "--warehouse",
            warehouse,
            *options,
        ],
        log=logs / "metastore.log",
        env=env,
        cwd=logs,
    )
    processes.wait_port(server, port, timeout=240)
    return f"thrift://{HOST}:{port}"


def start_spark_cluster(
    processes: Processes,
    logs: Path,
    env: Mapping[str, str],
    *,
    worker_cores: int,
    worker_memory: str,
    workers: int = 1,
) -> str:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1; returns the master
    URL. Worker 1 logs to ``spark-worker.log``, worker N > 1 to ``spark-worker-N.log``.

    Each application gets one core unless it asks for more (``spark.deploy.defaultCores``;
    ``spark.cores.max``), so concurrent backfills share the cluster instead of the first
    taking every core.
    """
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = {**env, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST}
    master_port, master_ui = processes.free_port(), processes.free_port()
    master = processes.start(
        "spark-master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            HOST,
            "--port",
            str(master_port),
            "--webui-port",
            str(master_ui),
        ],
        log=logs / "spark-master.log",
        env={**env, "SPARK_MASTER_OPTS": "-Dspark.deploy.defaultCores=1"},
        cwd=logs,
    )
    processes.wait_port(master, master_port, timeout=120)
    url = f"spark://{HOST}:{master_port}"
    started = [
        _start_spark_worker(processes, logs, env, url, number, worker_cores, worker_memory)
        for number in range(1, workers + 1)
    ]
    for worker in started:
        processes.wait_until(
            worker,
            lambda w=worker: (
                "Successfully registered with master" in w.log.read_text(errors="replace")
            ),
            what="registration with the master",
            timeout=120,
        )
    return url


def _start_spark_worker(
    processes: Processes,
    logs: Path,
    env: Mapping[str, str],
    master: str,
    number: int,
    cores: int,
    memory: str,
) -> Server:
    name = "spark-worker" if number == 1 else f"spark-worker-{number}"
    work = logs / ("spark-work" if number == 1 else f"spark-work-{number}")
    work.mkdir(exist_ok=True)
    port, ui = processes.free_port(), processes.free_port()
    return processes.start(
        name,
        [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            HOST,
            "--port",
            str(port),
            "--webui-port",
            str(ui),
            "--cores",
            str(cores),
            "--memory",
            memory,
            "--work-dir",
            str(work),
            master,
        ],
        log=logs / f"{name}.log",
        env=env,
        cwd=logs,
    )


def start_s3(processes: Processes, logs: Path, env: Mapping[str, str]) -> str:
    """An S3 API (moto) on 127.0.0.1; returns its endpoint URL."""
    import sys

    port = processes.free_port()
    server = processes.start(
        "s3",
        [str(Path(sys.executable).parent / "moto_server"), "-H", HOST, "-p", str(port)],
        log=logs / "s3.log",
        env=env,
        cwd=logs,
    )
    processes.wait_port(server, port, timeout=60)
    return f"http://{HOST}:{port}"


def s3_client(endpoint: str, env: Mapping[str, str]):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=env["AWS_DEFAULT_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def upload_tree(client, root: Path, bucket: str, prefix: str) -> int:
    """Copy a local tree to ``s3://bucket/prefix`` (creating the bucket); returns files."""
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        client.create_bucket(Bucket=bucket)
    count = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
        count += 1
    return count
