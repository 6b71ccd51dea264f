"""Incremental reader for the model's tool-mode answer, turned into OpenAI-style deltas.

With ``tools`` the prompt asks the model for ONE JSON object: ``{"tool_call":null,"response":..}``,
``{"tool_call":{"name":..,"arguments":{..}}}`` or ``{"tool_calls":[{..},{..}]}``. The text arrives
in arbitrary fragments and must be streamed as it arrives, so this is a hand-written, char-level
JSON reader that never needs the whole text; the non-streaming path runs the very same machine
over the whole text (``parse_answer``), so both paths always agree.

Speed (issue #12; bench/run.py section 6): the machine is char-level in what it decides, but
it reads a fragment in runs wherever the outcome cannot differ: a string's content up to its
end or a cut escape at once (found with ``str.find``/``replace``, decoded by the C
``scanstring``), a whole container it only skips or records raw by the C JSON reader (strict;
anything it refuses is read char by char, which decides), plain keys and scalars by regex.
Events come at the same feeds with the same text as from the plain char-by-char reading.

Rules (the edge cases are decided here, once):

* Leading whitespace is dropped. A leading fence opener (```` ``` ```` / ```` ```json ````) is
  skipped only when a ``{`` follows it; otherwise the text is prose (a code answer keeps its fence).
* JSON mode (first significant char ``{``): ``response`` strings stream decoded as content;
  ``tool_call`` (object or null) and ``tool_calls`` (array) yield calls, indexed 0.. in order.
  A call needs its ``name`` (the first non-empty string ``name``); a call without one is
  dropped. ``arguments``: an object is passed on as its raw JSON text, however deep (read by
  this loop, never decoded; raw control characters inside its strings are escaped so the text
  stays valid JSON); a string is used when it decodes to a JSON object (within
  ``jsondepth.MAX_DEPTH`` levels), else ``{}``; absent, null or any other type gives ``{}``.
  The first ``arguments`` key wins. Unknown keys are skipped; key order is free.
  Everything after the object closes is ignored.
* A call is emitted whole: its ``ToolCallStart`` and one ``ToolCallArgs`` holding all of its
  arguments come together, once the arguments are complete (their value closed, or the call
  object closed without one). A client so never receives a call whose arguments are not a
  complete JSON object; the price is that argument text is not streamed piece by piece
  (docs/prompt-format.md, "Tool calls are emitted whole").
* Strings are read leniently: raw control characters are accepted; a lone surrogate escape
  decodes to U+FFFD (never half a character is emitted).
* An object that closes without any ``response``/``tool_call``/``tool_calls`` key, or that turns
  out invalid before anything was emitted (a call held back counts as not emitted), is shown as
  text: its raw text becomes content and reading goes on as prose from the offending char. If
  something was already emitted, the rest is ignored (and a call held back is dropped).
* Cut off while open (``finish`` with the object unclosed): content stays as streamed, calls
  emitted stay; a named call whose arguments are unfinished is dropped (``cut_call``), never
  closed off or shown as text, and ``cut_off`` is set (the caller says ``length``). Cut off
  before any call was named or any content emitted, the raw text is content, as above.
* Prose mode: text streams as content, but a suffix that could still begin an embedded
  ``{"tool_call``/``{"tool_calls``/``{"response"`` object (with trailing whitespace and a
  fence opener before it) is held back. On ``{ "key" :`` the prose before it (less a trailing
  fence opener and whitespace) is content and the object is read in JSON mode.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from cli_proxy import jsondepth
from cli_proxy.read.answer_events import (
    AnswerEvent,
    ContentDelta,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallStart,
)

# The event types live in answer_events.py (run/ and every delivery format import them from
# there); they stay importable from here.
__all__ = [
    "AnswerEvent",
    "AnswerParser",
    "ContentDelta",
    "ParsedAnswer",
    "ReasoningDelta",
    "ToolCallArgs",
    "ToolCallStart",
    "accumulate",
    "parse_answer",
]


_KEYS = ("tool_call", "tool_calls", "response")
_TRIGGER = re.compile(r'\{[ \t\n\r]*"(?:tool_calls?|response)"[ \t\n\r]*:')
_PARTIAL = re.compile(r'\{[ \t\n\r]*(?:"([a-z_]*)(?:(")[ \t\n\r]*)?)?\Z')
_FENCE_TAIL = re.compile(r"(?:```[\w+.#-]*|``?)\Z")
_FENCE_OPEN = re.compile(r"```[\w+.#-]*[ \t\n\r]*")
_STR_RUN = re.compile(r'[^"\\\x00-\x1f]*')
# a backslash that does not start a complete escape (once ``\\\\`` and ``\\"`` are blanked)
_BAD_ESC = re.compile(r'\\(?!["\\/bfnrt]|u[0-9a-fA-F]{4})')
_CTRL = re.compile(r"[\x00-\x1f]")
_CTRL_ESC = {c: json.dumps(chr(c))[1:-1] for c in range(0x20)}
_SURROGATE = re.compile("[\ud800-\udfff]")
_WS = re.compile(r"[ \t\n\r]*")
_SKIM_DEPTH = 16  # deeper than this, containers are read char by char only
# a plain string (no escape, no control char) or a number/literal ended within the text
_SCALAR_RE = (
    r'"[^"\\\x00-\x1f]*"'
    r"|(?:-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null)"
    r"(?=[^0-9A-Za-z.+\-])"
)
_SCALAR = re.compile(_SCALAR_RE)
# an object member with a plain key: key and colon, and its value if a plain scalar
_MEMBER = re.compile(r'"[^"\\\x00-\x1f]*"[ \t\n\r]*:(?:[ \t\n\r]*(' + _SCALAR_RE + "))?")
_TOK_RUN = re.compile(r"[0-9A-Za-z.+\-]*")
_TOK_OK = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESC_RE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_HEX = frozenset("0123456789abcdefABCDEF")
_TOK_START = frozenset("-0123456789tfn")

# modes of the parser as a whole
_M_LEAD, _M_PROSE, _M_JSON, _M_DONE, _M_FINISHED = range(5)
# states of the JSON reader
_S_VALUE, _S_ARR_FIRST, _S_OBJ_FIRST, _S_OBJ_KEY, _S_COLON, _S_AFTER = range(6)
_S_STR, _S_ESC, _S_TOK = range(6, 9)
# roles of a value (and of the container it opens); >= _V_NAME means "collect the decoded text"
_V_SKIP, _V_RAW, _V_TOP, _V_CALL, _V_CALLS, _V_RESPONSE, _V_NAME, _V_ARGS, _V_KEY = range(9)
_TOP_ROLES = {"response": _V_RESPONSE, "tool_call": _V_CALL, "tool_calls": _V_CALLS}
# how far a call's arguments got
_A_NONE, _A_RAW, _A_STR, _A_DONE, _A_EMPTY = range(5)
# outcomes of one run of the JSON reader over a chunk
_GO, _CLOSED, _ERROR = range(3)


class _Call:
    """One call object being read."""

    __slots__ = ("args", "held", "index", "name", "pending")

    def __init__(self) -> None:
        self.index: int | None = None  # set when its name is complete
        self.name = ""
        self.args = _A_NONE
        self.held: str | None = None  # complete arguments text that arrived before the name
        self.pending: list[str] = []  # its arguments text, held until they are complete


class _Frame:
    """An open JSON container."""

    __slots__ = ("arr", "call", "key", "role")

    def __init__(self, arr: bool, role: int, call: _Call | None = None) -> None:
        self.arr = arr
        self.role = role
        self.call = call
        self.key: str | None = None


class _NotStrict(ValueError):
    """``NaN``/``Infinity``: Python's JSON reader takes them, this one does not."""


def _no_constant(name: str) -> object:
    raise _NotStrict(name)


# The C JSON reader, strict (no raw control chars in strings, no NaN/Infinity): a container
# it reads whole is one this reader would take too, ending at the same char, so it can skip
# over the container at C speed. Anything it refuses goes char by char (which then decides).
# (typeshed types the scanner's context as a scanner, and leaves scanstring out)
_scan_once = json.scanner.make_scanner(
    json.JSONDecoder(parse_constant=_no_constant)  # type: ignore[arg-type]
)
_Scanstring = Callable[[str, int, bool], tuple[str, int]]
_scanstring: _Scanstring = json.decoder.scanstring  # type: ignore[attr-defined]


def _skim(s: str, i: int) -> int:
    """End of the complete, valid JSON value at ``s[i]`` (``{`` or ``[``), else 0."""
    try:
        return int(_scan_once(s, i)[1])
    except (ValueError, RecursionError, StopIteration):
        return 0


def _body_end(s: str, i: int, q: int) -> int:
    """End of the string content from ``s[i]``, which holds a backslash before ``q`` (the next
    quote, or the end of ``s``): its closing quote, a backslash that does not start a
    complete escape (cut by the end of ``s``, or invalid), or the end of ``s``.

    Escaped backslashes and quotes are blanked (pairing backslashes from the left, as a
    reader does), then the first quote left is the closing one: all at C speed. The window
    grows until it holds the answer, so a short string in a long text costs little."""
    n = len(s)
    width = q - i + 64
    while True:
        stop = n if n - i <= width else i + width
        r = s[i:stop].replace("\\\\", "  ").replace('\\"', "  ")
        q = r.find('"')
        bad = _BAD_ESC.search(r)
        if q >= 0 or stop == n:
            end = q if q >= 0 else len(r)
            return i + (bad.start() if bad is not None and bad.start() < end else end)
        if bad is not None and bad.start() < len(r) - 6:  # not where the window cut it
            return i + bad.start()
        width *= 8


def _unescape(s: str, i: int, j: int) -> str | None:
    """The string content ``s[i:j]`` (no quote, complete escapes) decoded; None if it holds a
    surrogate, which the char-by-char reader decodes (a pair split by a chunk, lone ones)."""
    text: str = (
        _scanstring(s, i, False) if s.startswith('"', j) else _scanstring(s[i:j] + '"', 0, False)
    )[0]
    if not text.isascii() and _SURROGATE.search(text) is not None:
        return None
    return text


def _strip_len(text: str, end: int) -> int:
    """Length of ``text[:end]`` without trailing whitespace and a trailing fence opener."""
    t = text[:end].rstrip()
    m = _FENCE_TAIL.search(t)
    if m is not None:
        t = t[: m.start()].rstrip()
    return len(t)


def _viable(text: str, k: int) -> bool:
    """Whether ``text[k:]`` (starting with ``{``) may still grow into an answer object's head."""
    m = _PARTIAL.match(text, k)
    if m is None:
        return False
    word, quote = m.group(1), m.group(2)
    if word is None:
        return True
    if quote:
        return word in _KEYS
    return any(key.startswith(word) for key in _KEYS)


def _coalesce(events: list[AnswerEvent]) -> list[AnswerEvent]:
    """Merge adjacent content pieces and adjacent argument pieces of the same call."""
    if len(events) < 2:
        return events
    out: list[AnswerEvent] = []
    for ev in events:
        last = out[-1] if out else None
        if isinstance(ev, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + ev.text)
        elif (
            isinstance(ev, ToolCallArgs)
            and isinstance(last, ToolCallArgs)
            and last.index == ev.index
        ):
            out[-1] = ToolCallArgs(ev.index, last.fragment + ev.fragment)
        else:
            out.append(ev)
    return out


class AnswerParser:
    """Turns answer text fed in arbitrary fragments into events, independent of the split."""

    _jprefix: str  # skipped fence opener, shown if the object falls back to text
    _jraw: list[str]  # raw text of the object while nothing was emitted
    _emitted: bool  # the current object produced an event
    _recognized: bool  # the current object has an answer key
    _stack: list[_Frame]
    _st: int
    _vrole: int  # role of the value expected next
    _srole: int  # role of the open string
    _skey: bool  # the open string is a key
    _sbuf: list[str]  # decoded text of the open string, when collected
    _esc: str  # escape in progress, after the backslash
    _high: int  # pending high surrogate
    _tok: str  # number/literal in progress
    _raw_on: bool  # recording an arguments object's raw text
    _acall: _Call | None  # the call whose arguments are being recorded
    _rparts: list[str]  # recorded raw text of the arguments object so far

    def __init__(self, new_id: Callable[[], str]) -> None:
        self._new_id = new_id
        self._out: list[AnswerEvent] = []
        self._text: list[str] = []  # content not yet put in _out (one event per run of text)
        self._mode = _M_LEAD
        self._lead = ""  # LEAD: significant text seen so far (a possible fence opener)
        self._held = ""  # PROSE: text held back as a possible answer-object head
        self._ncalls = 0  # calls named so far (the open one included)
        self._open_call: _Call | None = None  # named, arguments not complete: held back
        self._sep = ""  # the break between prose and the reply that follows it
        self._prose_out = False  # prose content was emitted already
        self.cut_off = False  # the answer object ended unclosed after it produced events
        self.cut_call: int | None = None  # the call dropped at the end (arguments unfinished)
        self._reset_json("")

    # -- public ---------------------------------------------------------------------------

    def feed(self, text: str) -> list[AnswerEvent]:
        """Consume a fragment; returns the events it completes."""
        if self._mode == _M_FINISHED:
            return []
        self._out = []
        while text and self._mode in (_M_LEAD, _M_PROSE, _M_JSON):
            if self._mode == _M_LEAD:
                text = self._lead_step(text)
            elif self._mode == _M_PROSE:
                text = self._prose_step(text)
            else:
                text = self._json_step(text)
        self._flush_text()
        return _coalesce(self._out)

    def finish(self) -> list[AnswerEvent]:
        """Flush what is held back and close off a cut-off answer; call once at the end."""
        if self._mode == _M_FINISHED:
            return []
        self._out = []
        if self._mode == _M_LEAD:
            self._say(self._lead)
        elif self._mode == _M_PROSE:
            self._say(self._held)
        elif self._mode == _M_JSON and not self._emitted and self._open_call is None:
            self._say(self._jprefix + "".join(self._jraw))
        else:
            if self._mode == _M_JSON:  # not closed: the model's answer was cut off
                self.cut_off = True
            self.cut_call = self._drop_open_call()
        self._mode = _M_FINISHED
        self._flush_text()
        return _coalesce(self._out)

    @property
    def finish_reason(self) -> Literal["stop", "tool_calls"]:
        """``tool_calls`` iff any call was emitted."""
        return "tool_calls" if self._ncalls - (self._open_call is not None) else "stop"

    # -- modes ----------------------------------------------------------------------------

    def _lead_step(self, text: str) -> str:
        buf = (self._lead + text).lstrip()
        self._lead = ""
        if not buf:
            return ""
        if buf[0] == "{":
            self._enter_json("")
            return buf
        if buf[0] == "`":
            m = _FENCE_OPEN.match(buf)
            if m is None:
                if buf in ("`", "``"):
                    self._lead = buf
                    return ""
            elif m.end() == len(buf):
                self._lead = buf
                return ""
            elif buf[m.end()] == "{":
                self._enter_json(buf[: m.end()])
                return buf[m.end() :]
        self._mode = _M_PROSE
        return buf

    def _prose_step(self, text: str) -> str:
        buf = self._held + text
        self._held = ""
        m = _TRIGGER.search(buf)
        if m is not None:
            cut = _strip_len(buf, m.start())
            self._say(buf[:cut])
            self._enter_json("")
            # prose then a reply object: the reply continues the prose, so the break between
            # them stays (a line break, else a space), not "Sure, here it is:final answer"
            gap = buf[cut : m.start()]
            space = gap[: len(gap) - len(gap.lstrip())]  # before any fence opener
            if self._text or self._prose_out:
                self._sep = "\n" if "\n" in space else (" " if space else "")
            return buf[m.start() :]
        k = buf.rfind("{")
        h = _strip_len(buf, k if k >= 0 and _viable(buf, k) else len(buf))
        self._say(buf[:h])
        self._held = buf[h:]
        return ""

    def _json_step(self, text: str) -> str:
        i, outcome = self._run(text)
        if outcome == _GO:
            if self._emitted:
                self._jraw = []
            else:
                self._jraw.append(text)
            return ""
        if outcome == _ERROR:  # a call whose arguments never completed is not a call
            self._drop_open_call()
        if self._emitted or (outcome == _CLOSED and self._recognized):
            self._mode = _M_DONE
            return ""
        raw = self._jprefix + "".join(self._jraw) + text[:i]
        self._reset_json("")
        self._mode = _M_PROSE
        self._say(raw)
        return text[i:]

    def _enter_json(self, prefix: str) -> None:
        self._reset_json(prefix)
        self._mode = _M_JSON

    def _reset_json(self, prefix: str) -> None:
        self._jprefix = prefix
        self._jraw = []
        self._emitted = False
        self._recognized = False
        self._stack = []
        self._st = _S_VALUE
        self._vrole = _V_TOP
        self._srole = _V_SKIP
        self._skey = False
        self._sbuf = []
        self._esc = ""
        self._high = 0
        self._tok = ""
        self._raw_on = False
        self._acall = None
        self._rparts = []

    # -- output ---------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        if text:
            self._text.append(text)

    def _push(self, event: AnswerEvent) -> None:
        self._flush_text()
        self._out.append(event)

    def _flush_text(self) -> None:
        if self._text and self._mode == _M_PROSE:
            self._prose_out = True
        if self._text:
            self._out.append(ContentDelta("".join(self._text)))
            self._text = []

    def _start_call(self, call: _Call, name: str) -> None:
        """The call is named: it is held back until its arguments are complete."""
        call.index = self._ncalls
        call.name = name
        self._ncalls += 1
        self._open_call = call
        if call.held is not None:
            self._args_out(call, call.held)
            call.held = None
            self._release(call)

    def _args_out(self, call: _Call, text: str) -> None:
        if text and call.index is not None:
            call.pending.append(text)

    def _release(self, call: _Call) -> None:
        """The call's arguments are complete: its start and arguments go out, at once."""
        if call is not self._open_call or call.index is None:
            return
        self._open_call = None
        self._emitted = True
        self._push(ToolCallStart(call.index, self._new_id(), call.name))
        self._push(ToolCallArgs(call.index, "".join(call.pending) or "{}"))
        call.pending = []

    def _drop_open_call(self) -> int | None:
        """Forget the call whose arguments never completed (cut off, or invalid JSON); it
        was never emitted, so the next call takes its index. Returns that index."""
        call = self._open_call
        if call is None:
            return None
        self._open_call = None
        self._ncalls -= 1
        return call.index

    # -- decoded strings ------------------------------------------------------------------

    def _dec(self, text: str) -> None:
        if self._high:
            text = "\ufffd" + text
            self._high = 0
        if self._srole == _V_RESPONSE:
            if text:
                self._emitted = True
                if self._sep:
                    self._text.append(self._sep)
                    self._sep = ""
                self._text.append(text)
        else:
            self._sbuf.append(text)

    def _dec_code(self, code: int) -> None:
        if 0xD800 <= code < 0xDC00:
            if self._high:
                self._dec("")
            self._high = code
        elif 0xDC00 <= code < 0xE000:
            if self._high:
                pair = 0x10000 + ((self._high - 0xD800) << 10) + (code - 0xDC00)
                self._high = 0
                self._dec(chr(pair))
            else:
                self._dec("\ufffd")
        else:
            self._dec(chr(code))

    def _end_string(self) -> None:
        role = self._srole
        if role >= _V_RESPONSE and self._high:
            self._dec("")
        if self._skey:
            self._stack[-1].key = "".join(self._sbuf) if role == _V_KEY else None
            self._st = _S_COLON
            return
        self._st = _S_AFTER
        if role == _V_NAME:
            call = self._stack[-1].call
            name = "".join(self._sbuf)
            if call is not None and name and call.index is None:
                self._start_call(call, name)
        elif role == _V_ARGS:
            call = self._stack[-1].call
            text = "".join(self._sbuf)
            try:  # (too deep to decode safely: not an object either)
                ok = isinstance(jsondepth.loads(text), dict)
            except ValueError:
                ok = False
            if call is not None:
                call.args = _A_DONE
                if call.index is not None:
                    self._args_out(call, text if ok else "{}")
                    self._release(call)
                else:
                    call.held = text if ok else "{}"

    # -- the JSON reader ------------------------------------------------------------------

    def _run(self, s: str) -> tuple[int, int]:
        """Read ``s``; returns (position, outcome). On _ERROR the position is the bad char.

        One loop over integer states on purpose: it is the hot path of every tool-mode answer,
        and each state's step inline avoids a method call per token. Not split and re-measured;
        its speed stands as measured on 2026-11-28 (``bench/run.py --only answer-reader``,
        medians of 3 on this 2-core VM): 16-20 MB/s for prose in deltas, 340-350 MB/s whole,
        3.0-3.2 MB/s for 1 MB of structured arguments in deltas (docs/performance.md)."""
        i = 0
        n = len(s)
        stack = self._stack
        raw_from = 0 if self._raw_on else -1
        outcome = _GO
        slow_to = 0  # up to here strings go char by char (a surrogate escape needs it)
        while i < n:
            st = self._st
            if st == _S_STR:
                # fast: the string's content up to its end or an incomplete escape, at once
                if i >= slow_to and not self._high:
                    j = s.find('"', i)
                    if j < 0:
                        j = n
                    plain = s.find("\\", i, j) < 0
                    if not plain:
                        j = _body_end(s, i, j)
                        plain = s.find("\\", i, j) < 0
                    if j > i:
                        if self._srole >= _V_RESPONSE:
                            text = s[i:j] if plain else _unescape(s, i, j)
                            if text is None:
                                slow_to = j
                            else:
                                self._dec(text)
                                i = j
                        elif raw_from >= 0:
                            if _CTRL.search(s, i, j) is not None:
                                esc = s[i:j].translate(_CTRL_ESC)
                                self._rparts.append(s[raw_from:i])
                                self._rparts.append(esc)
                                raw_from = j
                            i = j
                        else:
                            i = j
                    if i == j:
                        if i < n and s[i] == '"':
                            i += 1
                            self._end_string()
                            continue
                        if i == n:
                            break
                m = _STR_RUN.match(s, i)
                j = m.end() if m is not None else i
                if j > i:
                    if self._srole >= _V_RESPONSE:
                        self._dec(s[i:j])
                    i = j
                    if i == n:
                        break
                c = s[i]
                i += 1
                if c == '"':
                    self._end_string()
                elif c == "\\":
                    m = _ESC_RE.match(s, i - 1)
                    if m is None:  # cut by the fragment's end, or invalid: go char by char
                        self._st = _S_ESC
                        self._esc = ""
                        continue
                    i = m.end()
                    if self._srole >= _V_RESPONSE:
                        hexa = m.group(1)
                        if hexa is None:
                            self._dec(_ESCAPES[m.group(2)])
                        else:
                            self._dec_code(int(hexa, 16))
                elif raw_from >= 0:  # raw control char: escape it to keep the JSON valid
                    esc = json.dumps(c)[1:-1]
                    self._rparts.append(s[raw_from : i - 1])
                    self._rparts.append(esc)
                    raw_from = i
                elif self._srole >= _V_RESPONSE:
                    self._dec(c)
                continue
            c = s[i]
            if st == _S_ESC:
                esc = self._esc
                if not esc:
                    if c == "u":
                        self._esc = "u"
                    elif c in _ESCAPES:
                        if self._srole >= _V_RESPONSE:
                            self._dec(_ESCAPES[c])
                        self._st = _S_STR
                    else:
                        outcome = _ERROR
                        break
                elif c in _HEX:
                    esc += c
                    self._esc = esc
                    if len(esc) == 5:
                        if self._srole >= _V_RESPONSE:
                            self._dec_code(int(esc[1:], 16))
                        self._st = _S_STR
                else:
                    outcome = _ERROR
                    break
                i += 1
                continue
            if st == _S_TOK:
                m = _TOK_RUN.match(s, i)
                j = m.end() if m is not None else i
                self._tok += s[i:j]
                i = j
                if i == n:
                    break
                if _TOK_OK.fullmatch(self._tok) is None:
                    outcome = _ERROR
                    break
                self._tok = ""
                self._st = _S_AFTER
                continue
            if c in " \t\n\r":
                i += 1
                if i < n and s[i] in " \t\n\r":
                    m = _WS.match(s, i)
                    i = m.end() if m is not None else i
                continue
            top = stack[-1] if stack else None
            if st == _S_AFTER and c == "," and top is not None:
                if top.arr:
                    self._st = _S_VALUE
                    self._vrole = _V_CALL if top.role == _V_CALLS else min(top.role, _V_RAW)
                else:
                    self._st = _S_OBJ_KEY
                i += 1
                continue
            if top is not None and (
                (c == "}" and not top.arr and st in (_S_OBJ_FIRST, _S_AFTER))
                or (c == "]" and top.arr and st in (_S_ARR_FIRST, _S_AFTER))
            ):
                i += 1
                stack.pop()
                role = top.role
                if role == _V_TOP:
                    outcome = _CLOSED
                    break
                self._st = _S_AFTER
                if role == _V_CALL and top.call is not None:
                    call = top.call
                    if call.index is not None and call.args in (_A_NONE, _A_EMPTY):
                        self._args_out(call, "{}")
                    self._release(call)
                elif role == _V_ARGS and self._acall is not None:
                    call = self._acall
                    self._rparts.append(s[raw_from:i])
                    text = "".join(self._rparts)
                    call.args = _A_DONE
                    if call.index is not None:
                        self._args_out(call, text)
                        self._release(call)
                    else:
                        call.held = text
                    self._raw_on = False
                    self._acall = None
                    self._rparts = []
                    raw_from = -1
                continue
            if st in (_S_OBJ_FIRST, _S_OBJ_KEY) and c == '"' and top is not None:
                if top.role in (_V_SKIP, _V_RAW, _V_ARGS):
                    # fast: a plain key, its colon and a plain scalar value, if all here
                    m = _MEMBER.match(s, i)
                    if m is not None:
                        i = m.end()
                        top.key = None
                        if m.group(1) is None:
                            self._st = _S_VALUE
                            self._vrole = _V_SKIP if top.role == _V_SKIP else _V_RAW
                        else:
                            self._st = _S_AFTER
                        continue
                self._skey = True
                self._srole = _V_KEY if top.role in (_V_TOP, _V_CALL) else _V_SKIP
                self._sbuf = []
                self._st = _S_STR
            elif st == _S_COLON and c == ":" and top is not None:
                self._st = _S_VALUE
                self._vrole = self._key_role(top)
            elif st in (_S_VALUE, _S_ARR_FIRST):
                role = self._vrole
                if role <= _V_RAW and (m := _SCALAR.match(s, i)) is not None:
                    # fast: a plain string or a number/literal that ends here
                    i = m.end()
                    self._st = _S_AFTER
                    continue
                if (
                    c in "{["
                    and (role <= _V_RAW or role == _V_ARGS)
                    and len(stack) < _SKIM_DEPTH
                    and s.find("}" if c == "{" else "]", i) >= 0
                    and (end := _skim(s, i))
                ):
                    # a whole container that is skipped or recorded as is: read at C speed
                    if role == _V_ARGS and top is not None and top.call is not None:
                        call = top.call
                        if c == "[":
                            call.args = _A_EMPTY
                        else:
                            call.args = _A_DONE
                            if call.index is not None:
                                self._args_out(call, s[i:end])
                                self._release(call)
                            else:
                                call.held = s[i:end]
                    i = end
                    self._st = _S_AFTER
                    continue
                if c == "{" and self._vrole == _V_ARGS and top is not None and top.call:
                    self._acall = top.call
                    top.call.args = _A_RAW
                    self._raw_on = True
                    self._rparts = []
                    raw_from = i
                if not self._begin_value(c, top):
                    outcome = _ERROR
                    break
                if self._st == _S_TOK:
                    continue
            else:
                outcome = _ERROR
                break
            i += 1
        if raw_from >= 0:
            self._rparts.append(s[raw_from:i])
        return i, outcome

    def _key_role(self, frame: _Frame) -> int:
        key = frame.key
        role = frame.role
        if role == _V_TOP:
            if key in _TOP_ROLES:
                self._recognized = True
            return _TOP_ROLES.get(key or "", _V_SKIP)
        if role == _V_CALL and frame.call is not None:
            if key == "name":
                frame.key = None
                return _V_NAME if frame.call.index is None else _V_SKIP
            if key == "arguments":
                return _V_ARGS if frame.call.args == _A_NONE else _V_SKIP
            return _V_SKIP
        return _V_RAW if role in (_V_RAW, _V_ARGS) else _V_SKIP

    def _begin_value(self, c: str, top: _Frame | None) -> bool:
        """Open the value starting with ``c``; False if no JSON value starts so."""
        role = self._vrole
        call = top.call if top is not None else None
        if role == _V_ARGS and call is not None and c != "{":
            call.args = _A_STR if c == '"' else _A_EMPTY
        if c == "{":
            if role == _V_CALL:
                self._stack.append(_Frame(False, _V_CALL, _Call()))
            elif role in (_V_TOP, _V_ARGS, _V_RAW):
                self._stack.append(_Frame(False, role))
            else:
                self._stack.append(_Frame(False, _V_SKIP))
            self._st = _S_OBJ_FIRST
        elif c == "[":
            arr_role = role if role in (_V_CALLS, _V_RAW) else _V_SKIP
            self._stack.append(_Frame(True, arr_role))
            self._vrole = _V_CALL if arr_role == _V_CALLS else arr_role
            self._st = _S_ARR_FIRST
        elif c == '"':
            self._skey = False
            self._srole = role if role in (_V_RESPONSE, _V_NAME, _V_ARGS, _V_RAW) else _V_SKIP
            self._sbuf = []
            self._st = _S_STR
        elif c in _TOK_START:
            self._tok = ""
            self._st = _S_TOK
        else:
            return False
        return True


@dataclass(frozen=True)
class ParsedAnswer:
    """A whole answer, as the non-streaming path returns it."""

    content: str | None
    tool_calls: list[tuple[str, str, str]]
    finish_reason: Literal["stop", "tool_calls"]


def accumulate(events: Iterable[AnswerEvent]) -> tuple[str, list[tuple[str, str, str]]]:
    """Content text and ``(id, name, arguments)`` per call, in index order, from events."""
    content: list[str] = []
    calls: dict[int, tuple[str, str, list[str]]] = {}
    for ev in events:
        if isinstance(ev, ContentDelta):
            content.append(ev.text)
        elif isinstance(ev, ToolCallStart):
            calls[ev.index] = (ev.id, ev.name, [])
        elif isinstance(ev, ToolCallArgs) and ev.index in calls:
            calls[ev.index][2].append(ev.fragment)
    return "".join(content), [(c[0], c[1], "".join(c[2])) for _, c in sorted(calls.items())]


def parse_answer(text: str, new_id: Callable[[], str]) -> ParsedAnswer:
    """Non-streaming path: the streaming machine over the whole text, so both paths agree."""
    parser = AnswerParser(new_id)
    content, calls = accumulate(parser.feed(text) + parser.finish())
    return ParsedAnswer(content or None, calls, parser.finish_reason)
