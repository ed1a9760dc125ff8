// Drives a headless Chromium for the dashboard's end-to-end tests.
//
// The Rust test (tests/e2e/common/browser.rs) writes one JSON command per line on stdin and
// reads one JSON answer per line on stdout: {"id", "ok", "value"} or {"id", "ok": false,
// "error"}. The page's own errors (uncaught exceptions, console errors, refused
// policies) are collected and returned by the "errors" command, so a test can assert
// that there were none.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

// axe-core, the accessibility checker, run in the page by the "axe" command.
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

const executablePath = process.env.FLOTILLA_CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  headless: true,
  // The machine has no network but loopback: keep Chromium from reaching out.
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    // performance.memory to the byte, for the benchmark harness's heap figure.
    "--enable-precise-memory-info",
  ],
});
// The control plane's certificate is signed by its own CA, which this browser does
// not know.
const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1440, height: 960 } });
const page = await context.newPage();
const errors = [];
page.on("pageerror", (e) => errors.push(`exception: ${e.message}`));
page.on("console", (m) => {
  if (m.type() === "error") errors.push(`console: ${m.text()}`);
});

// A query that meets a navigation (the page reloads itself when a sign-in link is
// opened in it) is asked again once the new page has loaded.
async function settled(query) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await query();
    } catch (e) {
      const msg = String(e && e.message);
      if (attempt >= 5 || !(msg.includes("Execution context was destroyed") || msg.includes("navigat"))) throw e;
      await page.waitForLoadState("load");
    }
  }
}

const ops = {
  goto: async ({ url }) => {
    await page.goto(url, { waitUntil: "load" });
    return page.url();
  },
  fill: async ({ selector, value }) => page.fill(selector, value),
  click: async ({ selector }) => page.click(selector),
  // The text of the first element that matches, or null when none does.
  text: async ({ selector }) => {
    const el = await page.$(selector);
    return el ? el.textContent() : null;
  },
  // The texts of every element that matches.
  texts: async ({ selector }) => page.$$eval(selector, (els) => els.map((e) => e.textContent)),
  attr: async ({ selector, name }) => {
    const el = await page.$(selector);
    return el ? el.getAttribute(name) : null;
  },
  count: async ({ selector }) => (await page.$$(selector)).length,
  visible: async ({ selector }) => page.isVisible(selector),
  eval: async ({ expression }) => page.evaluate(expression),
  screenshot: async ({ path, fullPage }) => {
    await page.screenshot({ path, fullPage: !!fullPage });
    return path;
  },
  errors: async () => errors.splice(0),
  // axe-core's WCAG 2 A and AA rules on the page as it is: the violations, each with
  // its rule, impact and the elements it found.
  axe: async () => {
    await page.evaluate(axeSource);
    return page.evaluate(async () => {
      const r = await window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa"] } });
      return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5) }));
    });
  },
  // A full garbage collection, so that a heap figure counts what the page keeps.
  gc: async () => {
    const cdp = await context.newCDPSession(page);
    await cdp.send("HeapProfiler.collectGarbage");
    await cdp.detach();
    return true;
  },
  close: async () => {
    await browser.close();
    return "closed";
  },
};

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let id = null;
  try {
    const cmd = JSON.parse(line);
    id = cmd.id;
    const op = ops[cmd.op];
    if (!op) throw new Error(`unknown op ${cmd.op}`);
    const value = await settled(() => op(cmd));
    process.stdout.write(`${JSON.stringify({ id, ok: true, value: value ?? null })}\n`);
    if (cmd.op === "close") break;
  } catch (e) {
    process.stdout.write(`${JSON.stringify({ id, ok: false, error: String(e && e.message ? e.message : e) })}\n`);
  }
}
await browser.close().catch(() => {});
process.exit(0);
