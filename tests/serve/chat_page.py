#!/usr/bin/env python3
"""The chat page of `k3 serve` (issue 27) in headless Chromium, driven through the Chrome
DevTools protocol (websockets). Run by .ci/run in target/ci-venv (`openai`, `websockets`):
    python3 tests/serve/chat_page.py target/debug/k3 tests/fixtures/tiny-k3-text [OUT_DIR]

Chromium is Debian's (`apt-get install chromium`). Servers and the browser listen on
127.0.0.1 only, on free ports; every wait is bounded and the script is killed after
HARD_TIMEOUT. Checks:
  * a forced reply (K3_TEST_FORCE_IDS: thinking with <b>tags</b>, an answer with <script> text
    and a code block) typed with Enter: thinking and answer in their places, as text (no
    element, no dialog), the code block as code, equal to the same request made with the
    openai client at temperature 0 (the request the page sent carries the temperature and max
    tokens it shows); the prefill progress bar saw the whole prompt; usage stats shown;
  * a forced tool call is shown as a block and exported with its id;
  * Shift-Enter makes a new line; Export JSON downloads the messages array, which equals the
    conversation; a screenshot after the reply (OUT_DIR/chat-page.png);
  * --api-key: the page asks for the key (a wrong one is refused), keeps it in session
    storage and never in a URL; Stop during a long reply: the server logs the client leaving
    (499) and answers the next message; New chat during a reply leaves an empty conversation;
  * no request goes to any other host (Network events of the page).
"""

import base64
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import warnings

import openai
from websockets.sync.client import connect

import k3server
from k3server import MODEL, TOOL_REPLY

# websockets' sync client wants a context manager; a plain connection is what CDP needs here
warnings.filterwarnings("ignore", category=DeprecationWarning)

HARD_TIMEOUT = 420
WAIT = 120
OUT = sys.argv[3] if len(sys.argv) > 3 else "target/chat-page"
# The browser's processes (the servers are k3server's)
PROCS = []
# The forced reply (`k3 tokenize --special` of its markup, TOKENIZER.md §13):
REASONING = "Let me think about <b>tags</b>."
CONTENT = "Here is <script>alert(1)</script> as text, and code:\n```\nfn main() {}\n```\nDone."
FORCED = (
    "9413,1019,2704,1215,555,65,29,20086,993,65,13757,163588,39964,163589,163587,12092,163589,"
    "12214,387,555,8046,29,24742,7,16,11716,8046,29,559,2913,11,316,3253,777,11512,10964,2777,"
    "539,10944,11512,25702,13,163588,12092,163589,163588,2778,163589,163585"
)
SYSTEM = "You answer in one line. " * 6
QUESTION = "What is <script> in HTML?"
KEY = "page-test-key"


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what.split("\n")[0][:110], flush=True)


def until(fn, what, timeout=WAIT):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Server(k3server.Server):
    """A k3server.Server on one thread, without a K3_API_KEY from this environment; `url`
    is the chat page (the root, with its slash)."""

    def __init__(self, args, env=None):
        super().__init__(["--threads", "1", *args], env, unset=["K3_API_KEY"])
        self.url += "/"


class Browser:
    """Headless Chromium with one page, over CDP; events are kept in `events`."""

    def __init__(self, downloads):
        self.dir = tempfile.mkdtemp(prefix="k3-chromium-")
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        check(exe is not None, "chromium is installed (apt-get install chromium)")
        self.p = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--disable-extensions",
             "--disable-default-apps", "--disable-features=Translate,MediaRouter",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={self.dir}", "--window-size=1000,760", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        PROCS.append(self.p)
        port_file = os.path.join(self.dir, "DevToolsActivePort")
        until(lambda: os.path.exists(port_file) and open(port_file).read().count("\n") >= 1,
              "DevToolsActivePort")
        port = open(port_file).read().split("\n")[0].strip()
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        browser_ws = json.load(urllib.request.urlopen(
            f"http://127.0.0.1:{port}/json/version", timeout=10))["webSocketDebuggerUrl"]
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self.bws = connect(browser_ws, max_size=None, open_timeout=10)
        self.n = 0
        self.events = []
        self.call("Page.enable")
        self.call("Network.enable")
        self.call("Runtime.enable")
        self.call("Browser.setDownloadBehavior", {
            "behavior": "allow", "downloadPath": downloads, "eventsEnabled": True}, ws=self.bws)

    def call(self, method, params=None, ws=None):
        ws = ws or self.ws
        self.n += 1
        ws.send(json.dumps({"id": self.n, "method": method, "params": params or {}}))
        end = time.time() + WAIT
        while time.time() < end:
            m = json.loads(ws.recv(timeout=WAIT))
            if m.get("id") == self.n:
                if "error" in m:
                    raise AssertionError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)
        raise AssertionError(f"{method}: no answer")

    def js(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise AssertionError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def open(self, url):
        self.call("Page.navigate", {"url": url})
        # loaded: the model list answered, or the page asks for the API key
        until(lambda: self.js("document.readyState === 'complete' && document.body && "
                              "(document.body.dataset.state !== 'loading' || "
                              "!document.getElementById('keybox').hidden)"), "the page to load")

    def type_and_enter(self, text, shift=False):
        self.js("document.getElementById('input').focus()")
        self.call("Input.insertText", {"text": text})
        key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13,
               "nativeVirtualKeyCode": 13, "modifiers": 8 if shift else 0}
        self.call("Input.dispatchKeyEvent", dict(key, type="keyDown", text="\r"))
        self.call("Input.dispatchKeyEvent", dict(key, type="keyUp"))

    def click(self, element_id):
        self.js(f"document.getElementById({json.dumps(element_id)}).click()")

    def close(self):
        for w in (self.ws, self.bws):
            try:
                w.close()
            except Exception:
                pass
        self.p.terminate()
        try:
            self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


LAST = "(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop(); " \
       "return m && {thinking: m.querySelector('.thinking').textContent, " \
       "answer: m.querySelector('.answer').textContent, " \
       "code: [...m.querySelectorAll('.answer pre code')].map(c => c.textContent), " \
       "elements: [...m.querySelectorAll('.answer *, .thinking *')].map(e => e.tagName), " \
       "stats: m.querySelector('.stats').textContent}; })()"


def replies(b):
    return b.js("document.querySelectorAll('.msg.assistant').length")


def wait_reply(b, n):
    until(lambda: replies(b) == n and b.js("document.body.dataset.state") == "idle",
          f"reply {n} to finish")
    return b.js(LAST)


def squash(s):
    return re.sub(r"\s|`", "", s)


def forced_reply(b, downloads):
    srv = Server(["--ctx", "512", "--prefill-chunk", "8"], {"K3_TEST_FORCE_IDS": FORCED})
    try:
        b.open(srv.url)
        check(b.js("document.getElementById('model').textContent") == MODEL,
              "the page names the served model")
        b.js("document.getElementById('system').value = " + json.dumps(SYSTEM))
        b.js("document.getElementById('temperature').value = '0'")
        b.js("document.getElementById('max_tokens').value = '200'")
        # Shift-Enter: a new line, nothing sent
        b.type_and_enter("line one", shift=True)
        check(b.js("document.getElementById('input').value") == "line one\n"
              and replies(b) == 0, "Shift-Enter starts a new line")
        b.js("document.getElementById('input').value = ''")
        b.type_and_enter(QUESTION)
        got = wait_reply(b, 1)
        # the same request through the openai client at temperature 0
        client = openai.OpenAI(base_url=srv.url + "v1", api_key="unused", max_retries=0,
                               timeout=WAIT)
        r = client.chat.completions.create(
            model=MODEL, temperature=0, max_tokens=200,
            messages=[{"role": "system", "content": SYSTEM.strip()},
                      {"role": "user", "content": QUESTION}])
        msg = r.choices[0].message
        reasoning = (msg.model_extra or {}).get("reasoning_content")
        check((reasoning, msg.content) == (REASONING, CONTENT),
              f"the openai client gets the forced reply: {reasoning!r} {msg.content!r}")
        check(got["thinking"] == reasoning, f"thinking in its place: {got['thinking']!r}")
        check(squash(got["answer"]) == squash(msg.content),
              f"answer in its place: {got['answer']!r}")
        check(got["code"] == ["fn main() {}"], f"the code block shown as code: {got['code']}")
        check(all(t in ("SPAN", "PRE", "CODE") for t in got["elements"]),
              f"model output is text: no element from it ({got['elements']})")
        check("<script>alert(1)</script>" in got["answer"], "<script> shown as text")
        check(not any(e["method"] == "Page.javascriptDialogOpening" for e in b.events),
              "no script from the reply ran (no dialog)")
        check(b.js("document.querySelectorAll('script').length") == 1, "one script: the page's")
        st = got["stats"]
        check(re.search(r"\d+ tokens · [\d.]+ tokens/s · \d+ prompt tokens \(\d+ cached\) · "
                        r"finish: stop", st) is not None, f"usage stats shown: {st!r}")
        # the request the page sent: the temperature and max tokens it shows
        posts = [e["params"]["request"] for e in b.events
                 if e["method"] == "Network.requestWillBeSent"
                 and e["params"]["request"]["method"] == "POST"]
        sent = json.loads(posts[0]["postData"])
        check((sent["temperature"], sent["max_tokens"], sent["stream"]) == (0, 200, True),
              f"the page sends what it shows: {sent['temperature']}, {sent['max_tokens']}")
        # the prefill progress (8 positions a chunk; none after the last chunk) was shown
        last = b.js("document.getElementById('progress').dataset.last || ''")
        check(re.fullmatch(r"\d+/\d+", last) is not None, f"the progress bar was shown: {last!r}")
        d, t = (int(x) for x in last.split("/"))
        check(0 < d < t and d % 8 == 0 and t >= r.usage.prompt_tokens,
              f"the bar saw the prefill go up to its last chunk: {last}")
        check(b.js("document.getElementById('progress').hidden"), "the bar hides once done")
        # the full format of ENGINE.md §11, with the rate and time left (sent once a chunk is done)
        shown = b.js("progress(': prefill 512/2048 130.4/s 11.8 s'), "
                     "[document.getElementById('ptext').textContent, "
                     "document.getElementById('fill').style.width]")
        check(shown == ["Reading the prompt: 512 / 2048 positions · 130/s · 12 s left", "25%"],
              f"rate and time left shown when sent: {shown}")
        b.js("hideProgress()")
        os.makedirs(OUT, exist_ok=True)
        b.js("document.querySelector('.msg.assistant details.think').open = true")
        shot = b.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(os.path.join(OUT, "chat-page.png"), "wb") as f:
            f.write(base64.b64decode(shot))
        check(os.path.getsize(os.path.join(OUT, "chat-page.png")) > 1000,
              f"screenshot in {OUT}/chat-page.png")
        # export: the messages array, ready for `k3 chat --messages`
        b.click("export")
        path = until(lambda: next(iter(glob.glob(os.path.join(downloads, "k3-chat-*.json"))),
                                  None), "the export download")
        until(lambda: path.endswith(".json") and os.path.getsize(path) > 0, "the file")
        exported = json.load(open(path))
        want = [{"role": "system", "content": SYSTEM.strip()},
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": CONTENT, "reasoning_content": REASONING}]
        check(exported == want, f"export is the conversation: {exported}")
        # new chat empties it
        b.click("new")
        check(replies(b) == 0 and json.loads(b.js("exportJson()")) == want[:1],
              "New chat starts over")
        return srv.host
    finally:
        srv.stop()



def tool_call(b):
    srv = Server(["--ctx", "512"], {"K3_TEST_FORCE_IDS": TOOL_REPLY})
    try:
        b.open(srv.url)
        b.type_and_enter("Weather in Paris?")
        wait_reply(b, 1)
        block = b.js("(() => { const t = [...document.querySelectorAll('.msg.assistant .tool')]"
                     ".pop(); return t && [t.querySelector('.fn').textContent, "
                     "JSON.parse(t.querySelector('pre').textContent)]; })()")
        check(block == ["tool call: get_weather", {"city": "Paris"}],
              f"a tool call shown as a block: {block}")
        calls = json.loads(b.js("exportJson()"))[-1].get("tool_calls")
        check(len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"
              and calls[0]["id"].startswith("call_"), f"and exported with its id: {calls}")
        return srv.host
    finally:
        srv.stop()


def key_and_stop(b):
    srv = Server(["--ctx", "4096", "--api-key", KEY])
    try:
        b.open(srv.url)
        until(lambda: not b.js("document.getElementById('keybox').hidden"),
              "the page to ask for the key")
        b.js("document.getElementById('key').value = 'wrong'")
        b.js("document.getElementById('keyform').requestSubmit()")
        until(lambda: "Not accepted" in b.js("document.getElementById('keyerr').textContent")
              and not b.js("document.getElementById('keybox').hidden"), "a wrong key refused")
        check(True, "a wrong key is refused and asked again")
        b.js(f"document.getElementById('key').value = {json.dumps(KEY)}")
        b.js("document.getElementById('keyform').requestSubmit()")
        until(lambda: b.js("document.getElementById('model').textContent") == MODEL,
              "the model list with the key")
        check(b.js("sessionStorage.getItem('k3.apiKey')") == KEY, "the key in session storage")
        urls = [e["params"]["request"]["url"] for e in b.events
                if e["method"] == "Network.requestWillBeSent"]
        check(all(KEY not in u for u in urls) and KEY not in b.js("location.href"),
              "the key is never in a URL")
        # Stop during a long reply
        b.js("document.getElementById('temperature').value = '1'")
        b.js("document.getElementById('max_tokens').value = '3900'")
        b.type_and_enter("Tell me a very long story.")
        until(lambda: (b.js(LAST) or {}).get("thinking") or (b.js(LAST) or {}).get("answer"),
              "the long reply to start streaming")
        check(b.js("document.body.dataset.state") == "busy", "the long reply is running")
        b.click("stop")
        until(lambda: b.js("document.body.dataset.state") == "idle", "Stop to end the reply")
        check("stopped" in b.js(LAST)["stats"], "the reply says it was stopped")
        until(lambda: any("POST /v1/chat/completions 499" in l and "client disconnected" in l
                          for l in srv.lines), "the server to log the cancellation")
        check(True, "the server logged the cancellation (499, client disconnected)")
        # and keeps serving
        b.js("document.getElementById('max_tokens').value = '4'")
        b.type_and_enter("And now a short one.")
        got = wait_reply(b, 2)
        check("finish: length" in got["stats"] and "4 tokens" in got["stats"],
              f"the next message is answered: {got['stats']!r}")
        # New chat during a reply: the reply stops and joins no conversation
        b.js("document.getElementById('max_tokens').value = '3900'")
        b.type_and_enter("Another long story.")
        until(lambda: replies(b) == 3 and ((b.js(LAST) or {}).get("thinking")
                                           or (b.js(LAST) or {}).get("answer")),
              "the third reply to stream")
        b.click("new")
        until(lambda: b.js("document.body.dataset.state") == "idle", "New chat to stop it")
        time.sleep(0.5)
        check(json.loads(b.js("exportJson()")) == [] and replies(b) == 0,
              "New chat during a reply leaves an empty conversation")
        return srv.host
    finally:
        srv.stop()


def main():
    k3server.watchdog(HARD_TIMEOUT, also=PROCS)
    downloads = tempfile.mkdtemp(prefix="k3-downloads-")
    b = Browser(downloads)
    try:
        hosts = {forced_reply(b, downloads), tool_call(b), key_and_stop(b)}
        urls = [e["params"]["request"]["url"] for e in b.events
                if e["method"] == "Network.requestWillBeSent"]
        other = [u for u in urls
                 if not u.startswith(("data:", "blob:", "about:"))
                 and urllib.parse.urlparse(u).netloc not in hosts]
        check(urls and not other, f"no request to any other host ({len(urls)} requests): {other}")
    finally:
        b.close()
        shutil.rmtree(downloads, ignore_errors=True)
    print("chat_page.py: PASSED", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        for p in PROCS:
            p.kill()
        k3server.fail(f"{type(e).__name__}: {e}")
