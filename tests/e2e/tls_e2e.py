#!/usr/bin/env python3
"""End to end: `dynrt serve` over TLS, through the real binary.

Self-signed certificates come from the `openssl` command (Debian's ca-certificates, which
scripts/install-deps.sh installs, depends on it; exit 77, skipped, where it is missing).
Checks: the listening line says https; the certificate from the --config file's `listen`
section with a --tls-key flag that wins over the file's; a client that verifies the
certificate gets /healthz, a call and a streamed call (SSE to [DONE]) on one kept-alive
connection; plain HTTP on the port gets no HTTP answer; SIGHUP serves a renewed certificate to
new connections, and keeps it when the key is caught half-written; a start with one of the two
files, a missing file or a key of another certificate is refused with exit 2 and the file
named.

usage: tls_e2e.py DYNRT   (run from the repository root)
"""
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

from checks import check, stop, summary

DYNRT = sys.argv[1]


def make_cert(folder, name):
    """A self-signed P-256 certificate for 127.0.0.1 with CN `name`; (cert, key) paths."""
    cert, key = os.path.join(folder, name + ".crt"), os.path.join(folder, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "2", "-subj", "/CN=" + name, "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def connect(port, trusted):
    """A verifying HTTPS connection; its peer certificate's CN."""
    context = ssl.create_default_context(cafile=trusted)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    conn.connect()
    subject = dict(x[0] for x in conn.sock.getpeercert()["subject"])
    return conn, subject.get("commonName")


def ask(conn, method, path, body=None):
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, dict(resp.getheaders()), resp.read().decode()


class Stderr:
    """The server's stderr, read as it comes (bounded by `seconds`)."""

    def __init__(self, proc):
        self.fd, self.text = proc.stderr.fileno(), ""

    def wait_for(self, needle, seconds=30):
        deadline = time.time() + seconds
        while needle not in self.text:
            left = deadline - time.time()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                break
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            self.text += chunk.decode(errors="replace")
        found = needle in self.text
        check(found, "dynrt serve printed %r (stderr: %r)" % (needle, self.text[-400:]))
        if found:
            self.text = self.text[self.text.index(needle) + len(needle):]


def refused(args, says):
    proc = subprocess.run([DYNRT, "serve", "templates", "--port", "0"] + args,
                          capture_output=True, text=True, timeout=60)
    check(proc.returncode == 2 and says in proc.stderr,
          "dynrt serve %s exits 2 saying %r (got %d: %r)" % (" ".join(args), says,
                                                             proc.returncode, proc.stderr[-300:]))


def main():
    if shutil.which("openssl") is None:
        print("tls_e2e: no openssl command to make a certificate with; skipped")
        return 77
    tmp = tempfile.mkdtemp(prefix="dynrt-tls-")
    cert, key = make_cert(tmp, "first")
    other_cert, other_key = make_cert(tmp, "other")
    renewed_cert, renewed_key = make_cert(tmp, "renewed")
    # The files dynrt serves, overwritten on renewal as a certificate manager would.
    live_cert, live_key = os.path.join(tmp, "live.crt"), os.path.join(tmp, "live.key")
    shutil.copy(cert, live_cert)
    shutil.copy(key, live_key)
    config = os.path.join(tmp, "dynrt.yaml")
    with open(config, "w") as f:
        f.write("listen: {host: 127.0.0.1, port: 0, tls_cert: %s, tls_key: %s}\n"
                % (live_cert, other_key))
    proc = subprocess.Popen([DYNRT, "serve", "templates", "--config", config, "--tls-key",
                             live_key, "--time-scale", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"dynrt listening on https://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit("dynrt serve did not start over TLS: %r %s" % (line, proc.stderr.read()))
    port = int(m.group(1))
    err = Stderr(proc)
    try:
        conn, name = connect(port, cert)
        check(name == "first", "the configured certificate is served (CN %s)" % name)
        s, _, _ = ask(conn, "GET", "/healthz")
        check(s == 200, "GET /healthz over TLS is 200")
        call = {"model": "sim", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        s, _, b = ask(conn, "POST", "/v1/chat/completions", call)
        check(s == 200 and "choices" in json.loads(b), "a call over TLS is answered: %d" % s)
        s, h, b = ask(conn, "POST", "/v1/chat/completions", dict(call, stream=True))
        check(s == 200 and h.get("Content-Type") == "text/event-stream",
              "a streamed call over TLS is SSE")
        check(b.startswith("data: {") and b.endswith("data: [DONE]\n\n"),
              "the stream arrives whole, to [DONE]: %r" % b[-60:])
        conn.close()

        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        sock.close()
        check(b"HTTP/" not in answer, "plain HTTP on the TLS port gets no HTTP answer")

        shutil.copy(renewed_cert, live_cert)
        shutil.copy(renewed_key, live_key)
        proc.send_signal(signal.SIGHUP)
        err.wait_for("reloaded the TLS certificate (subject CN=renewed")
        conn, name = connect(port, renewed_cert)
        check(name == "renewed", "after SIGHUP new connections get the renewed certificate")
        check(ask(conn, "GET", "/healthz")[0] == 200, "and are served")
        conn.close()
        with open(live_key, "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\nMIG")  # caught half-written
        proc.send_signal(signal.SIGHUP)
        err.wait_for("TLS reload refused, still using the previous certificate")
        conn, name = connect(port, renewed_cert)
        check(name == "renewed", "a refused reload keeps the renewed certificate")
        conn.close()
    finally:
        stop(proc)

    refused(["--tls-cert", cert], "needs both a certificate and its key")
    refused(["--tls-cert", os.path.join(tmp, "missing.crt"), "--tls-key", key],
            "cannot read the TLS certificate " + os.path.join(tmp, "missing.crt"))
    refused(["--tls-cert", cert, "--tls-key", other_key],
            "the TLS key %s does not match the certificate %s" % (other_key, cert))
    shutil.rmtree(tmp, ignore_errors=True)
    return summary("tls_e2e")


if __name__ == "__main__":
    sys.exit(main())
