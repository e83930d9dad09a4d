"""A minimal local stand-in for the Hugging Face hub HTTP API (the part huggingface_hub's model_info and
snapshot_download use), serving a folder as one model repository on 127.0.0.1. Tests point HF_ENDPOINT at it,
exactly as a user points it at a mirror."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

SHA = "0123456789abcdef0123456789abcdef01234567"


class HubMirror:
    def __init__(self, repo: str, folder: Path):
        self.repo, self.folder, self.requests = repo, Path(folder), []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _files(self) -> dict[str, Path]:
        return {p.name: p for p in sorted(self.folder.iterdir()) if p.is_file()}

    def _handler(self):
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body=b"", headers=None, head=False):
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _route(self, head: bool):
                path = unquote(urlparse(self.path).path)
                mirror.requests.append((self.command, path))
                info_prefix = f"/api/models/{mirror.repo}"
                if path == info_prefix or path.startswith(info_prefix + "/revision/"):
                    siblings = [
                        {"rfilename": n, "size": p.stat().st_size, "blobId": hashlib.sha1(p.read_bytes()).hexdigest()}
                        for n, p in mirror._files().items()
                    ]
                    body = json.dumps(
                        {
                            "id": mirror.repo,
                            "modelId": mirror.repo,
                            "sha": SHA,
                            "siblings": siblings,
                            "private": False,
                            "disabled": False,
                            "gated": False,
                        }
                    ).encode()
                    return self._send(200, body, {"Content-Type": "application/json"}, head)
                resolve = f"/{mirror.repo}/resolve/"
                if path.startswith(resolve):
                    name = path[len(resolve) :].split("/", 1)[1]
                    file = mirror._files().get(name)
                    if file is None:
                        return self._send(404, b"not found", {"X-Error-Code": "EntryNotFound"}, head)
                    data = file.read_bytes()
                    etag = '"' + hashlib.sha1(data).hexdigest() + '"'
                    return self._send(
                        200,
                        data,
                        {"ETag": etag, "X-Repo-Commit": SHA, "Content-Type": "application/octet-stream"},
                        head,
                    )
                return self._send(404, b"no route", {"X-Error-Code": "RepoNotFound"}, head)

            def do_GET(self):
                self._route(head=False)

            def do_HEAD(self):
                self._route(head=True)

        return Handler
