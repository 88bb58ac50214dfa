"""A real Kubernetes control plane for the tests: etcd and kube-apiserver on 127.0.0.1.

kube-apiserver is built from Debian's kubernetes source package by scripts/k8s/build-apiserver.sh
(cached outside the repository); PREFLIGHT_KUBE_APISERVER names the binary. Authentication is a
static token file (an admin in system:masters, a `runner` user with no rights until the printed
roles are bound to it, and `nobody`), authorization is RBAC, service-account tokens are signed with
a key made here. There is no kubelet, scheduler or controller manager: tests/k8s/kubelet.py stands
in for the kubelet of the test nodes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

TOKENS = {"admin": "admin-token-0123456789", "runner": "runner-token-0123456789", "nobody": "nobody-token-0123456789"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def apiserver_binary() -> str | None:
    path = os.environ.get("PREFLIGHT_KUBE_APISERVER")
    if path and os.access(path, os.X_OK):
        return path
    cache = Path(os.environ.get("PREFLIGHT_KUBE_CACHE", "/var/cache/preflight-kube"))
    found = sorted(cache.glob("kube-apiserver-*")) if cache.is_dir() else []
    return str(found[-1]) if found else None


class ApiServer:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="preflight-k8s-"))
        self.procs: list[subprocess.Popen] = []
        self.port = 0

    def start(self, binary: str) -> "ApiServer":
        d = self.dir
        client, peer, self.port = free_port(), free_port(), free_port()
        self._start("etcd", [shutil.which("etcd") or "etcd", "--data-dir", str(d / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{client}",
                             "--advertise-client-urls", f"http://127.0.0.1:{client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer}"])
        subprocess.run(["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
                       check=True, capture_output=True)
        (d / "tokens.csv").write_text(f"{TOKENS['admin']},admin,admin,system:masters\n"
                                      f"{TOKENS['runner']},runner,runner\n{TOKENS['nobody']},nobody,nobody\n")
        self._start("kube-apiserver", [
            binary, f"--etcd-servers=http://127.0.0.1:{client}", "--bind-address=127.0.0.1",
            f"--secure-port={self.port}", "--insecure-port=0", f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=RBAC",
            f"--service-account-key-file={d / 'sa.pub'}", f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc", "--api-audiences=https://kubernetes.default.svc",
            "--service-cluster-ip-range=198.18.200.0/24", "--advertise-address=198.18.200.1",
            "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true", "--v=0"])
        self.kubeconfig("admin")
        self.wait_ready()
        return self

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True))

    def kubeconfig(self, user: str, token: str | None = None, server: str | None = None) -> Path:
        """A kubeconfig for `user`, reaching the API server at `server` (host:port; default its own)."""
        path = self.dir / f"{user}.kubeconfig"
        path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: bed
  cluster: {{server: "https://{server or f'127.0.0.1:{self.port}'}", insecure-skip-tls-verify: true}}
users:
- name: {user}
  user: {{token: "{token or TOKENS[user]}"}}
contexts:
- name: {user}
  context: {{cluster: bed, user: {user}}}
current-context: {user}
""")
        return path

    def wait_ready(self, timeout: float = 90) -> None:
        import ssl
        import urllib.request

        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}/readyz",
                                         headers={"Authorization": f"Bearer {TOKENS['admin']}"})
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}: see {self.dir}")
            try:
                with urllib.request.urlopen(request, context=ctx, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"kube-apiserver not ready within {timeout:.0f}s: see {self.dir}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


class Relay:
    """A TCP relay from `address` (the test bed's bridge, which its network namespaces reach) to the API
    server on 127.0.0.1, so that pods run inside a node's namespace reach it as pods reach theirs.
    Bytes pass through untouched (TLS end to end). `with Relay(address, port) as relay:` relay.server."""

    def __init__(self, address: str, port: int) -> None:
        import threading

        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server((address, 0))
        self.listener.settimeout(0.5)
        self.server = f"{address}:{self.listener.getsockname()[1]}"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.sockets: list[socket.socket] = []

    def __enter__(self) -> "Relay":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        import threading

        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
