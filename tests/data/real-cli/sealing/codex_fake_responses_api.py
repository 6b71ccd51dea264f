#!/usr/bin/env python3
"""Minimal fake OpenAI Responses API (stdlib only) for probing the Codex CLI.

Records every request (method, path, headers, JSON body) as one JSON line to
--log.  Behaviour of POST /v1/responses is driven by --script, a JSON file
re-read on every request:  {"steps": [STEP, ...], "default": STEP}.  The n-th
POST /v1/responses uses steps[n] (n counted since server start), else default.
STEP kinds:
  {"kind": "text", "text": "hello", "reasoning": false}
  {"kind": "call", "name": "exec_command", "arguments": {"cmd": "touch /tmp/PWNED"},
   "call_type": "function_call"}          # or "custom_tool_call" / "local_shell_call"
  {"kind": "http", "status": 429, "headers": {"retry-after": "1"}, "body": {...}}
  {"kind": "sse_error", "code": "rate_limit_exceeded", "message": "..."}  # response.failed
Usage:  python3 codex_fake_responses_api.py --port 18080 --log req.jsonl --script s.json
"""

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
COUNTER = {"n": 0}
LOCK = threading.Lock()


def load_script():
    try:
        with open(ARGS.script) as f:
            return json.load(f)
    except Exception:
        return {"steps": [], "default": {"kind": "text", "text": "OK from fake"}}


def sse(event, data):
    data = dict(data)
    data.setdefault("type", event)
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def usage():
    return {
        "input_tokens": 1234,
        "input_tokens_details": {"cached_tokens": 1000},
        "output_tokens": 56,
        "output_tokens_details": {"reasoning_tokens": 7},
        "total_tokens": 1290,
    }


def build_stream(step, model):
    rid = "resp_" + uuid.uuid4().hex[:16]
    base = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    out = [sse("response.created", {"response": base, "sequence_number": 0})]
    seq = 1
    items = []
    idx = 0
    if step.get("reasoning"):
        rs = {
            "id": "rs_" + uuid.uuid4().hex[:12],
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Thinking about it."}],
        }
        out.append(
            sse(
                "response.output_item.added",
                {"output_index": idx, "item": {**rs, "summary": []}, "sequence_number": seq},
            )
        )
        seq += 1
        out.append(
            sse(
                "response.reasoning_summary_text.delta",
                {
                    "item_id": rs["id"],
                    "output_index": idx,
                    "summary_index": 0,
                    "delta": "Thinking about it.",
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
        out.append(
            sse(
                "response.reasoning_summary_text.done",
                {
                    "item_id": rs["id"],
                    "output_index": idx,
                    "summary_index": 0,
                    "text": "Thinking about it.",
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
        out.append(
            sse(
                "response.output_item.done",
                {"output_index": idx, "item": rs, "sequence_number": seq},
            )
        )
        seq += 1
        items.append(rs)
        idx += 1
    if step["kind"] == "text":
        text = step.get("text", "OK from fake")
        mid = "msg_" + uuid.uuid4().hex[:12]
        item0 = {
            "id": mid,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        out.append(
            sse(
                "response.output_item.added",
                {"output_index": idx, "item": item0, "sequence_number": seq},
            )
        )
        seq += 1
        out.append(
            sse(
                "response.content_part.added",
                {
                    "item_id": mid,
                    "output_index": idx,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
        chunks = [text[i : i + 5] for i in range(0, len(text), 5)] or [""]
        for c in chunks:
            out.append(
                sse(
                    "response.output_text.delta",
                    {
                        "item_id": mid,
                        "output_index": idx,
                        "content_index": 0,
                        "delta": c,
                        "sequence_number": seq,
                    },
                )
            )
            seq += 1
        out.append(
            sse(
                "response.output_text.done",
                {
                    "item_id": mid,
                    "output_index": idx,
                    "content_index": 0,
                    "text": text,
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
        part = {"type": "output_text", "text": text, "annotations": []}
        out.append(
            sse(
                "response.content_part.done",
                {
                    "item_id": mid,
                    "output_index": idx,
                    "content_index": 0,
                    "part": part,
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
        item = {
            "id": mid,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
        out.append(
            sse(
                "response.output_item.done",
                {"output_index": idx, "item": item, "sequence_number": seq},
            )
        )
        seq += 1
        items.append(item)
    elif step["kind"] == "call":
        ctype = step.get("call_type", "function_call")
        cid = "call_" + uuid.uuid4().hex[:12]
        fid = "fc_" + uuid.uuid4().hex[:12]
        if ctype == "function_call":
            args = step.get("arguments", {})
            args = args if isinstance(args, str) else json.dumps(args)
            item = {
                "id": fid,
                "type": "function_call",
                "status": "completed",
                "call_id": cid,
                "name": step["name"],
                "arguments": args,
            }
            if step.get("namespace"):
                item["namespace"] = step["namespace"]
        elif ctype == "custom_tool_call":
            item = {
                "id": fid,
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": cid,
                "name": step["name"],
                "input": step.get("input", ""),
            }
        else:  # local_shell_call
            item = {
                "id": fid,
                "type": "local_shell_call",
                "status": "completed",
                "call_id": cid,
                "action": {"type": "exec", "command": step.get("command", ["touch", "/tmp/PWNED"])},
            }
        out.append(
            sse(
                "response.output_item.added",
                {
                    "output_index": idx,
                    "item": {**item, "status": "in_progress"},
                    "sequence_number": seq,
                },
            )
        )
        seq += 1
        out.append(
            sse(
                "response.output_item.done",
                {"output_index": idx, "item": item, "sequence_number": seq},
            )
        )
        seq += 1
        items.append(item)
    if step["kind"] == "sse_error":
        fail = {
            **base,
            "status": "failed",
            "error": {
                "code": step.get("code", "server_error"),
                "message": step.get("message", "boom"),
            },
        }
        out.append(sse("response.failed", {"response": fail, "sequence_number": seq}))
        return out
    done = {**base, "status": "completed", "output": items, "usage": usage()}
    out.append(sse("response.completed", {"response": done, "sequence_number": seq}))
    return out


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _record(self, body):
        try:
            parsed = json.loads(body) if body else None
        except Exception:
            parsed = {"_raw": body.decode("utf-8", "replace")[:2000]}
        with LOCK, open(ARGS.log, "a") as f:
            f.write(
                json.dumps(
                    {
                        "t": time.time(),
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers.items()),
                        "body": parsed,
                    }
                )
                + "\n"
            )

    def _send(self, status, obj, headers=None):
        b = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(b)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        # GET /v1/responses with "Upgrade: websocket" = Responses-over-WebSocket attempt (built-in
        # openai provider). Answering 404 makes codex fall back to HTTPS POST after its retries.
        self._record(b"")
        if self.path.rstrip("/").endswith("/models"):
            return self._send(200, {"object": "list", "data": [], "models": []})
        self._send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        if (
            self.headers.get("content-encoding") == "zstd"
        ):  # ChatGPT-auth requests are zstd-compressed
            try:
                import subprocess

                body = subprocess.run(
                    ["zstd", "-dc"], input=body, capture_output=True, check=True
                ).stdout
            except Exception:
                pass
        self._record(body)
        if not self.path.rstrip("/").endswith("/responses"):
            return self._send(404, {"error": {"message": "not found"}})
        with LOCK:
            i = COUNTER["n"]
            COUNTER["n"] += 1
        sc = load_script()
        steps = sc.get("steps", [])
        step = (
            steps[i]
            if i < len(steps)
            else sc.get("default", {"kind": "text", "text": "OK from fake"})
        )
        if step["kind"] == "http":
            return self._send(
                step.get("status", 500),
                step.get("body", {"error": {"message": "fake error", "type": "server_error"}}),
                step.get("headers"),
            )
        try:
            model = json.loads(body).get("model", "fake")
        except Exception:
            model = "fake"
        chunks = build_stream(step, model)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for c in chunks:
            self.wfile.write(c)
            self.wfile.flush()
        self.close_connection = True


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=18080)
    p.add_argument("--log", default="/tmp/fake_requests.jsonl")
    p.add_argument("--script", default="/tmp/fake_script.json")
    ARGS = p.parse_args()
    ThreadingHTTPServer(("127.0.0.1", ARGS.port), H).serve_forever()


if __name__ == "__main__":
    main()
