"""A PostgreSQL server of its own on loopback, for scripts (bench-queue, fleet --backfill).

Debian's `postgresql` package: `initdb` and `postgres` from /usr/lib/postgresql/<newest>/bin, a cluster in a
temporary directory with trust authentication for the user `queue`, on a free 127.0.0.1 port. PostgreSQL refuses
to run as root: under root the cluster belongs to `nobody` and both programs run as it (`setpriv`). The tests do
the same in Swift (Tests/TranscodeServerTests/Support/PostgresServer.swift).
"""
import os, shutil, signal, socket, subprocess, sys, time

USER = "queue"


def binaries():
    root = "/usr/lib/postgresql"
    versions = sorted((int(v) for v in os.listdir(root) if v.isdigit()), reverse=True) if os.path.isdir(root) else []
    for version in versions:
        path = f"{root}/{version}/bin"
        if os.access(f"{path}/postgres", os.X_OK):
            return path
    sys.exit("PostgreSQL is missing; install it with: scripts/install-deps --test (apt-get install postgresql)")


def _as_postgres(arguments):
    if os.getuid() != 0:
        return arguments
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + arguments


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """initdb in `directory`, then `start()`; `stop(immediate=True)` is an outage (SIGQUIT), `False` a clean stop."""

    def __init__(self, directory):
        self.directory = directory
        self.bin = binaries()
        self.port = _free_port()
        self.process = None
        os.makedirs(directory, exist_ok=True)
        if os.getuid() == 0:
            os.chown(directory, 65534, 65534)
        with open(os.path.join(directory, "initdb.log"), "w") as log:
            subprocess.run(
                _as_postgres([f"{self.bin}/initdb", "-D", f"{directory}/data", "-U", USER, "--auth=trust",
                              "--encoding=UTF8", "--no-sync", "--no-instructions"]),
                stdout=log, stderr=subprocess.STDOUT, check=True)

    @property
    def url(self):
        return f"postgres://{USER}@127.0.0.1:{self.port}/postgres"

    def start(self, max_connections=200):
        log = open(os.path.join(self.directory, "postgres.log"), "a")
        self.process = subprocess.Popen(
            _as_postgres([f"{self.bin}/postgres", "-D", f"{self.directory}/data", "-h", "127.0.0.1",
                          "-p", str(self.port), "-k", self.directory, "-F", "-c", f"max_connections={max_connections}"]),
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"postgres exited; see {self.directory}/postgres.log")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        sys.exit("postgres did not start within 60 s")

    def stop(self, immediate=True):
        if self.process is None:
            return
        self.process.send_signal(signal.SIGQUIT if immediate else signal.SIGINT)
        self.process.wait()
        self.process = None
