"""The small harness the client scenarios share: named checks that each report what they
saw, waits with deadlines instead of sleeps, and an exit status that counts failures.

A scenario runs every check even after one fails, so one run shows all that is wrong.
"""

import json
import sys
import time
import traceback


class CheckFailed(AssertionError):
    pass


def expect(cond, what, seen=None):
    """Fails the current check with `what` and what was seen, unless `cond`."""
    if not cond:
        detail = "" if seen is None else f"; seen: {show(seen)}"
        raise CheckFailed(f"{what}{detail}")


def show(v, limit=1500):
    """A compact, bounded rendering of an object for a diagnostic."""
    if hasattr(v, "to_dict"):
        v = v.to_dict()
    try:
        s = json.dumps(v, default=str, sort_keys=True)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= limit else s[:limit] + f"... ({len(s)} chars)"


def wait_for(what, timeout, check, interval=0.1):
    """Polls `check` (returning (ok, seen)) until ok; fails with the last seen after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        ok, seen = check()
        if ok:
            return seen
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout}s waiting for {what}; last seen: {show(seen)}")
        time.sleep(interval)


class Scenario:
    """Runs named checks, prints each outcome, and exits non-zero if any failed."""

    def __init__(self, name):
        self.name = name
        self.failed = []
        self.passed = 0
        print(f"== {name}", flush=True)

    def check(self, name):
        """A decorator: runs the function now as the check `name`."""

        def run(fn):
            start = time.monotonic()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - every failure is reported, then counted
                self._failed(name, start, e)
            else:
                self._passed(name, start)
            return fn

        return run

    async def acheck(self, name, coro_fn):
        """Runs the coroutine function `coro_fn` as the check `name`."""
        start = time.monotonic()
        try:
            await coro_fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported, then counted
            self._failed(name, start, e)
        else:
            self._passed(name, start)

    def _passed(self, name, start):
        self.passed += 1
        print(f"ok   {name} ({time.monotonic() - start:.1f}s)", flush=True)

    def _failed(self, name, start, e):
        took = time.monotonic() - start
        print(f"FAIL {name} ({took:.1f}s): {type(e).__name__}: {describe(e)}", flush=True)
        # Where in the scenario it failed, without the client library's frames.
        for fr in traceback.extract_tb(e.__traceback__):
            if "/tests/clients/" in fr.filename and not fr.filename.endswith("harness.py"):
                print(f"     at {fr.filename.rsplit('/', 1)[-1]}:{fr.lineno}: {fr.line}", flush=True)
        self.failed.append(name)

    def finish(self):
        print(f"{self.name}: {self.passed} passed, {len(self.failed)} failed", flush=True)
        if self.failed:
            print("failed checks: " + ", ".join(self.failed), flush=True)
            sys.exit(1)


def describe(e):
    """An exception with the HTTP status and body when it is an API error."""
    status = getattr(e, "status", None)
    body = getattr(e, "body", None)
    if status is not None and body is not None:
        return f"HTTP {status} {getattr(e, 'reason', '')}: {body}"
    response = getattr(e, "response", None)  # kr8s's ServerError, httpx's HTTPStatusError
    if response is not None and hasattr(response, "request"):
        req = response.request
        return f"{e}; {req.method} {req.url} -> HTTP {response.status_code}: {response.text[:1000]}"
    return str(e)
