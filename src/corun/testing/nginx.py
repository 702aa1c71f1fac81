"""``Nginx``: a throwaway nginx on a loopback port, for tests and benchmarks.

The configuration is written into a directory of the caller's (pid file,
error log and every temporary path in it), so no root and no system
configuration are needed. It serves a directory of static files, with
keep-alive, ``ETag``/``Last-Modified`` (so conditional requests get 304),
and gzip for text (which nginx compresses on the fly and so sends chunked).
Extra ``location`` blocks may be added.

Which nginx: ``$CORUN_NGINX``, else ``nginx`` on ``PATH`` or in
``/usr/sbin`` (Debian's package; ``make install`` installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Final

from corun.testing.servers import free_port, wait_listening

#: Where Debian installs nginx (``/usr/sbin`` is not on every user's PATH).
_CANDIDATES: Final = ("/usr/sbin/nginx", "/usr/local/sbin/nginx")

_CONFIG: Final = """\
{user}
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    default_type text/plain;
    keepalive_timeout 60s;
    keepalive_requests 1000000;
    gzip on;
    gzip_min_length 1;
    gzip_types text/plain application/json;
    server {{
        listen 127.0.0.1:{port};
        root {root};
{locations}
    }}
}}
"""


class NginxMissing(RuntimeError):
    """No nginx binary was found."""


def find_nginx() -> str:
    """The nginx binary to run.

    Raises:
        NginxMissing: none is installed (the message says how to get one).
    """
    explicit = os.environ.get("CORUN_NGINX")
    if explicit:
        return explicit
    found = shutil.which("nginx")
    if found:
        return found
    for path in _CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    raise NginxMissing(
        "nginx is not installed: `make install` installs it (apt-get install nginx), "
        "or set CORUN_NGINX to a binary"
    )


class Nginx:
    """nginx serving ``root`` on ``127.0.0.1``; a context manager.

    Example::

        with Nginx(tmp_path / "nginx", root=tmp_path / "www") as server:
            url = f"{server.url}/index.html"

    Args:
        workdir: a directory for the configuration, pid, logs and
            temporary files (created).
        root: the directory served.
        locations: extra ``location`` blocks, as nginx configuration text.
        workers: worker processes.
    """

    def __init__(self, workdir: Path, *, root: Path, locations: str = "", workers: int = 1) -> None:
        self.workdir = workdir
        self.root = root
        self.locations = locations
        self.workers = workers
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Write the configuration, start nginx and wait until it accepts connections.

        Raises:
            NginxMissing: nginx is not installed.
            RuntimeError: nginx did not start (its error log is in the message).
        """
        binary = find_nginx()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self.workdir / "nginx.conf"
        config.write_text(
            _CONFIG.format(
                # As root, nginx would run its workers as nobody, who cannot
                # read a private temporary directory.
                user="user root;" if os.geteuid() == 0 else "",
                workers=self.workers,
                dir=self.workdir,
                port=self.port,
                root=self.root,
                locations=self.locations,
            )
        )
        log = self.workdir / "error.log"
        self._proc = subprocess.Popen(
            [binary, "-p", str(self.workdir), "-e", str(log), "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if not wait_listening("127.0.0.1", self.port, self._proc, timeout=timeout):
            self.stop()
            text = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"nginx did not start on port {self.port}: {text.strip()}")

    def stop(self) -> None:
        """Stop nginx (quickly) and wait for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()

    def __enter__(self) -> Nginx:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


__all__ = ["Nginx", "NginxMissing", "find_nginx"]
