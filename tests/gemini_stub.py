"""A stand-in for the Gemini API on 127.0.0.1, for tests of the real google-genai path.

It answers generateContent with a scripted reply (this is plumbing, not a model) and keeps
every request it saw, headers included, so tests can check what google-genai sent.
"""

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class GeminiStub:
    def __init__(
        self,
        reply_text: str = "Blurryface stands for Tyler Joseph's insecurities.",
        reply_for: Callable[[int, dict], str | dict] | None = None,
        logprobs: dict | None = None,
    ):
        """`reply_for(number, body)`, when given, writes each reply (number counts requests from 0): a text,
        or a dict that is the reply's one part (e.g. {"functionCall": {...}}). `logprobs`, when given, is
        the candidate's logprobsResult (the API's JSON) in every reply."""
        self.reply_text = reply_text
        self.reply_for = reply_for
        self.logprobs = logprobs
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                number = len(stub.requests)
                stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                text = stub.reply_for(number, body) if stub.reply_for else stub.reply_text
                part = {"text": text} if isinstance(text, str) else text  # a dict: a part such as a functionCall
                candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}
                if stub.logprobs:
                    candidate["logprobsResult"] = stub.logprobs
                reply = {
                    "candidates": [candidate],
                    "usageMetadata": {"promptTokenCount": 42, "candidatesTokenCount": 9, "thoughtsTokenCount": 5},
                    "modelVersion": "stub",
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
