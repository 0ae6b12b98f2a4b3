"""Solve a captcha through captchaq's gateway with a pingback, then read it.

In the style of CaptchaAI's pingback pattern
(blog.captchaai.com/captchaai-pingback-task-notification-patterns): a small
HTTP handler receives GET <url>?id=TASK_ID&code=TOKEN; the callback is a
hint, so the answer is then read from res.php (as that post advises against
trusting an unauthenticated callback). Standard library http.server instead
of Flask, so Debian's python3 and python3-requests are all it needs.

Usage:
    CAPTCHAQ_GATEWAY=http://127.0.0.1:8090 CAPTCHAAI_API_KEY=... python3 pingback.py
Prints "<id> <token>"; exits 2 on an error code, 3 when no callback came.
"""

import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import requests

BASE_URL = os.getenv("CAPTCHAQ_GATEWAY", "https://ocr.captchaai.com")
API_KEY = os.getenv("CAPTCHAAI_API_KEY", "")
MAX_TIMEOUT = float(os.getenv("MAX_TIMEOUT", "120"))

received = {}
arrived = threading.Event()


class PingbackHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        query = parse_qs(urlparse(self.path).query)
        task_id = query.get("id", [""])[0]
        code = query.get("code", [""])[0]
        if not task_id or not code:
            self.send_response(400)
            self.end_headers()
            return
        received[task_id] = code
        arrived.set()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args):
        pass


def main() -> None:
    server = HTTPServer(("127.0.0.1", 0), PingbackHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    callback_url = f"http://127.0.0.1:{server.server_port}/pingback"

    data = {
        "key": API_KEY,
        "method": "turnstile",
        "sitekey": "0x4AAAAAAABkMYinukE8nzY",
        "pageurl": "https://shop.example/checkout",
        "pingback": callback_url,
        "json": 1,
    }
    resp = requests.post(BASE_URL + "/in.php", data=data, timeout=30)
    result = resp.json()
    if result.get("status") != 1:
        print(result.get("request"))
        sys.exit(2)
    task_id = str(result["request"])

    if not arrived.wait(MAX_TIMEOUT):
        print("NO_CALLBACK")
        sys.exit(3)
    if task_id not in received:
        print("CALLBACK_FOR_ANOTHER_ID " + ",".join(received))
        sys.exit(3)

    # The callback says it is ready; the answer comes from res.php.
    resp = requests.get(BASE_URL + "/res.php",
                        params={"key": API_KEY, "action": "get", "id": task_id, "json": 1}, timeout=30)
    result = resp.json()
    if result.get("status") != 1:
        print(result.get("request"))
        sys.exit(2)
    token = result["request"]
    if token != received[task_id]:
        print("CALLBACK_DIFFERS")
        sys.exit(4)
    print(f"{task_id} {token}")
    server.shutdown()


if __name__ == "__main__":
    main()
