// Flotilla's dashboard: a read-only view of the fleet, live from watches.
//
// It signs in by trading a token for a read-only session (POST .../dashboard/session),
// then lists and watches the ordinary API paths with that session. Everything it shows
// is put in the page as text (textContent, attributes); the server's policy forbids
// markup from strings. Changes arriving from the watches are applied to plain maps and
// drawn at most once per animation frame; the workload list draws only the rows in view.

const SESSION_KEY = "flotilla.dashboard.session";
const ROW_HEIGHT = 30;
const TIMELINE_KEEP = 2000;
const TIMELINE_SHOWN = 200;
const SCHEDULING_REASONS = new Set(["Scheduled", "Rescheduled", "FailedScheduling", "Rebalanced", "FewerClusters"]);
const CLUSTER_ANNOTATION = "kcp.io/cluster";
const SYNC_LABEL_PREFIX = "state.workload.flotilla.io/";
const STATUS_ANNOTATION_PREFIX = "clusterstatus.workload.flotilla.io/";
// Companions follow their workloads; those of these kinds have a status worth showing,
// reported per cluster. The others (ConfigMaps, PodDisruptionBudgets, ...) are synced
// or refused, which the WorkloadPlacement says.
const COMPANION_KINDS = [
  ["Service", "api/v1/services"],
  ["Ingress", "apis/networking.k8s.io/v1/ingresses"],
  ["HorizontalPodAutoscaler", "apis/autoscaling/v2/horizontalpodautoscalers"],
];
const REFERENCED_LABEL = "workload.flotilla.io/referenced";

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- elements

// Builds an element. Attributes are set one by one (never event handlers), and
// children that are strings become text nodes: nothing is parsed as markup.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) throw new Error(`event handler attribute ${k}`);
    if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return el;
}

function setText(el, text) {
  const t = text === undefined || text === null ? "" : String(text);
  if (el.textContent !== t) el.textContent = t;
}

function setAttr(el, name, value) {
  const v = String(value);
  if (el.getAttribute(name) !== v) el.setAttribute(name, v);
}

// ---------------------------------------------------------------- quantities

const SUFFIX = {
  "": 1, n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};
const QUANTITY = /^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$/;

// A Kubernetes quantity as a number (cores, bytes, pods); NaN when it is not one.
export function quantity(q) {
  if (q === undefined || q === null) return NaN;
  const s = String(q).trim();
  if (s.length > 64) return NaN;
  const m = QUANTITY.exec(s);
  if (!m) return NaN;
  return parseFloat(m[1]) * (m[2] ? 10 ** parseInt(m[2], 10) : 1) * SUFFIX[m[3] || ""];
}

function cores(n) {
  if (!isFinite(n)) return "?";
  if (n < 1 && n !== 0) return `${Math.round(n * 1000)}m`;
  return `${Math.round(n * 100) / 100}`;
}

function bytes(n) {
  if (!isFinite(n)) return "?";
  for (const [unit, size] of [["Ti", 2 ** 40], ["Gi", 2 ** 30], ["Mi", 2 ** 20], ["Ki", 2 ** 10]]) {
    if (n >= size) return `${Math.round((n / size) * 10) / 10}${unit}`;
  }
  return `${n}`;
}

// ---------------------------------------------------------------- time

// The server's clock minus ours, from the Date header of its answers, so that ages
// read right on a machine whose clock is off.
let skewMs = 0;

function noteServerDate(resp) {
  const d = Date.parse(resp.headers.get("date") || "");
  if (isFinite(d)) skewMs = d - Date.now();
}

const serverNow = () => Date.now() + skewMs;

function age(ms) {
  if (!isFinite(ms)) return "never";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

function clock(ms) {
  if (!isFinite(ms)) return "";
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

// ---------------------------------------------------------------- session

let session = null; // { token, workspace (null: every workspace), expiresAt (ms) }
let renewTimer = null;

function sessionPath(workspace) {
  return workspace ? `/clusters/${encodeURIComponent(workspace)}/dashboard/session` : "/dashboard/session";
}

// The workspace a token is for, when its form says: a workspace token names it, and
// so do a sign-in link and a session (`*` is every workspace).
function tokenWorkspace(token) {
  const m = /^(fws1|fdl1|fds1)\.([a-z0-9*][a-z0-9-]{0,62})\./.exec(token);
  if (!m || m[2] === "*") return null;
  return m[2];
}

async function statusMessage(resp) {
  try {
    const body = await resp.json();
    if (body && typeof body.message === "string") return body.message;
  } catch (_) { /* not a Status */ }
  return `${resp.status} ${resp.statusText}`;
}

// Trades `token` for a session; throws with the server's reason when refused.
async function openSession(token) {
  const resp = await fetch(sessionPath(tokenWorkspace(token)), {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, Accept: "application/json" },
    cache: "no-store",
  });
  noteServerDate(resp);
  if (resp.status === 401 || resp.status === 403) throw new Refused(await statusMessage(resp));
  if (resp.status !== 201) throw new Error(await statusMessage(resp));
  const body = await resp.json();
  const s = body.status || {};
  return { token: s.token, workspace: s.workspace || null, expiresAt: Date.parse(s.expiresAt) - skewMs };
}

function keepSession(s) {
  session = s;
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
  clearTimeout(renewTimer);
  // Renewed halfway through its life, while the page is open.
  const wait = Math.max(10_000, (s.expiresAt - Date.now()) / 2);
  renewTimer = setTimeout(() => renew(30_000), Math.min(wait, 2 ** 31 - 1));
}

// Renews the session; a refusal ends it, anything else (the server restarting, a
// network that dropped) is tried again after `pause`.
async function renew(pause) {
  try {
    keepSession(await openSession(session.token));
  } catch (e) {
    if (e instanceof Refused || Date.now() >= session.expiresAt) {
      signOut(`The session could not be renewed: ${e.message}`);
    } else {
      renewTimer = setTimeout(() => renew(Math.min(pause * 2, 300_000)), pause);
    }
  }
}

function storedSession() {
  try {
    const s = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
    if (s && typeof s.token === "string" && s.expiresAt > Date.now()) return s;
  } catch (_) { /* unreadable: sign in again */ }
  sessionStorage.removeItem(SESSION_KEY);
  return null;
}

async function signIn(token) {
  const s = await openSession(token);
  keepSession(s);
  startBoard();
}

function signOut(why) {
  sessionStorage.removeItem(SESSION_KEY);
  session = null;
  clearTimeout(renewTimer);
  for (const w of watches) w.stop();
  watches = [];
  // A fresh page: nothing of the last session's data stays in memory.
  location.hash = "";
  if (why) sessionStorage.setItem("flotilla.dashboard.why", why);
  location.reload();
}

// ---------------------------------------------------------------- API and watches

function headers() {
  return {
    Authorization: `Bearer ${session.token}`,
    Accept: "application/json",
    "x-flotilla-managed-fields": "omit",
  };
}

class Refused extends Error {}
class Gone extends Error {}

// Lists `path`, then watches it from the list's resourceVersion; relists when the
// server says the version is too old, and reconnects with a growing pause on errors.
class Watch {
  constructor(name, path, handlers) {
    this.name = name;
    this.path = path;
    this.handlers = handlers;
    this.controller = new AbortController();
    this.state = "connecting";
    this.error = "";
  }

  stop() {
    this.controller.abort();
  }

  async get(url) {
    const resp = await fetch(url, { headers: headers(), signal: this.controller.signal, cache: "no-store" });
    noteServerDate(resp);
    if (resp.status === 401) throw new Refused(await statusMessage(resp));
    if (resp.status === 410) throw new Gone(await statusMessage(resp));
    if (!resp.ok) throw new Error(`${this.name}: ${await statusMessage(resp)}`);
    return resp;
  }

  async run() {
    let version = null;
    let pause = 500;
    while (!this.controller.signal.aborted) {
      try {
        if (version === null) {
          const list = await (await this.get(this.path)).json();
          version = list.metadata.resourceVersion;
          this.handlers.reset(list.items || []);
        }
        const sep = this.path.includes("?") ? "&" : "?";
        const resp = await this.get(`${this.path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(version)}`);
        this.setState("live", "");
        pause = 500;
        version = await this.read(resp, version);
      } catch (e) {
        if (this.controller.signal.aborted) return;
        if (e instanceof Refused) {
          signOut(`The server ended the session: ${e.message}`);
          return;
        }
        if (e instanceof Gone) version = null;
        this.setState("reconnecting", e.message || String(e));
        await new Promise((r) => setTimeout(r, pause));
        pause = Math.min(pause * 2, 10_000);
      }
    }
  }

  // Reads one watch to its end; returns the last version seen.
  async read(resp, version) {
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return version;
      const started = performance.now();
      // Only the new text is searched for line ends: a long line costs its length once.
      const from = buffer.length;
      buffer += value;
      let start = 0;
      for (let end = buffer.indexOf("\n", from); end >= 0; end = buffer.indexOf("\n", start)) {
        const line = buffer.slice(start, end);
        start = end + 1;
        if (!line.trim()) continue;
        const event = JSON.parse(line);
        if (event.type === "ERROR") {
          const status = event.object || {};
          if (status.code === 410) throw new Gone(status.message || "too old");
          throw new Error(`${this.name}: ${status.message || "watch error"}`);
        }
        const rv = event.object && event.object.metadata && event.object.metadata.resourceVersion;
        if (rv) version = rv;
        if (event.type !== "BOOKMARK") this.handlers.event(event.type, event.object);
      }
      buffer = buffer.slice(start);
      const ms = performance.now() - started;
      costs.chunks += 1;
      costs.applyMs += ms;
      costs.applyMaxMs = Math.max(costs.applyMaxMs, ms);
    }
  }

  setState(state, error) {
    this.state = state;
    this.error = error;
    draw();
  }
}

let watches = [];

// ---------------------------------------------------------------- the fleet's state

const clusters = new Map(); // name -> SyncTarget
// The workload kinds the scheduler places, with the short name kubectl knows them by.
// A CronJob is not placed (its schedule runs in the workspace): its Jobs are listed.
const WORKLOAD_KINDS = [
  ["Deployment", "deploy", "apis/apps/v1/deployments"],
  ["StatefulSet", "sts", "apis/apps/v1/statefulsets"],
  ["DaemonSet", "ds", "apis/apps/v1/daemonsets"],
  ["Job", "job", "apis/batch/v1/jobs"],
];
const workloads = new Map(WORKLOAD_KINDS.map(([kind]) => [kind, new Map()])); // kind -> "ws/ns/name" -> object
const placements = new Map(); // "ws/ns/name" -> WorkloadPlacement
const companions = new Map(); // "ws/ns/Kind/name" -> Service, Ingress or HorizontalPodAutoscaler
const timeline = []; // { at (ms), seen (ms, when the page saw it live), kind, text, key }
const timelineKeys = new Set();
// When each scheduling Event was first drawn (`ws/ns/name` -> epoch ms), the last
// 20,000: for the benchmark harness and for anyone asking how far behind the page is.
const shownAt = new Map();
let unshown = [];
let live = false; // past the first lists: what arrives now happened now

function workspaceOf(obj) {
  const a = (obj.metadata && obj.metadata.annotations) || {};
  return a[CLUSTER_ANNOTATION] || (session && session.workspace) || "root";
}

function keyOf(obj, name) {
  const m = obj.metadata || {};
  return `${workspaceOf(obj)}/${m.namespace || ""}/${name || m.name}`;
}

function condition(obj, type) {
  const cs = (obj && obj.status && obj.status.conditions) || [];
  return cs.find((c) => c.type === type);
}

// Timeline order: by time, then by when the page saw it.
const byTime = (a, b) => (a.at - b.at) || ((a.seen || 0) - (b.seen || 0));
let timelineUnsorted = false;

function addToTimeline(entry) {
  if (timelineKeys.has(entry.key)) return;
  timelineKeys.add(entry.key);
  if (!isFinite(entry.at)) entry.at = 0;
  if (live) entry.seen = Date.now();
  if (entry.event) unshown.push(entry.event);
  // Entries mostly come in order; only one that does not costs a sort, once.
  if (timeline.length && byTime(entry, timeline[timeline.length - 1]) < 0) timelineUnsorted = true;
  timeline.push(entry);
  if (timeline.length > TIMELINE_KEEP * 1.25) {
    sortTimeline();
    for (const old of timeline.splice(0, timeline.length - TIMELINE_KEEP)) timelineKeys.delete(old.key);
  }
  timelineDirty = true;
}

function sortTimeline() {
  if (timelineUnsorted) timeline.sort(byTime);
  timelineUnsorted = false;
}

function noteClusterReadiness(name, st) {
  const ready = condition(st, "Ready");
  if (!ready) return;
  const at = Date.parse(ready.lastTransitionTime);
  const lost = ready.status !== "True";
  addToTimeline({
    at,
    kind: lost ? "lost" : "ready",
    key: `cluster/${name}/${ready.status}/${ready.lastTransitionTime}`,
    text: lost ? `cluster ${name} NotReady: ${ready.reason || ""} ${ready.message || ""}`.trim() : `cluster ${name} Ready`,
  });
}

function noteAvailability(key, wp) {
  const available = condition(wp, "Available");
  if (!available || available.status !== "True") return;
  const where = ((wp.status && wp.status.summary) || "").trim();
  addToTimeline({
    at: Date.parse(available.lastTransitionTime),
    kind: "available",
    key: `available/${key}/${available.lastTransitionTime}/${where}`,
    text: `${key} Available${where ? ` on ${where}` : ""}`,
  });
}

function noteEvent(ev) {
  const at = Date.parse(ev.lastTimestamp || ev.eventTime || ev.firstTimestamp || ev.metadata.creationTimestamp);
  const o = ev.involvedObject || {};
  const key = `${workspaceOf(ev)}/${o.namespace || ""}/${o.name || ""}`;
  addToTimeline({
    at,
    kind: ev.type === "Warning" ? "warning" : "normal",
    key: `event/${ev.metadata.uid}/${ev.count || 1}`,
    text: `${ev.reason} ${key}: ${ev.message || ""}`,
    workload: key,
    event: `${workspaceOf(ev)}/${ev.metadata.namespace || ""}/${ev.metadata.name}`,
  });
}

let clustersDirty = true;
let workloadsDirty = true;
let timelineDirty = true;
let detailDirty = true;

// What the page keeps of an object: the fields it shows, so that 10,000 workloads
// cost what they show and not what they store.
function slimMeta(m, keep) {
  const out = { name: m.name, namespace: m.namespace, uid: m.uid, resourceVersion: m.resourceVersion };
  const a = m.annotations || {};
  const annotations = {};
  for (const k of Object.keys(a)) if (k === CLUSTER_ANNOTATION || (keep && k.startsWith(keep))) annotations[k] = a[k];
  out.annotations = annotations;
  return out;
}

const SLIM = {
  Workloads: (o) => ({ metadata: slimMeta(o.metadata || {}) }),
  WorkloadPlacements: (o) => ({ metadata: slimMeta(o.metadata || {}), spec: o.spec, status: o.status }),
  Companions: (o) => ({
    metadata: { ...slimMeta(o.metadata || {}, STATUS_ANNOTATION_PREFIX), labels: (o.metadata && o.metadata.labels) || {} },
    spec: { type: o.spec ? o.spec.type : undefined },
  }),
};

// Keeps `map` as the watch says, and marks what must be drawn again. `kind` is the
// kind of the objects when a map holds several (one list's reset then clears only
// its own); `slim` cuts an object down to what the page shows; `onKeys` hears that
// keys came or went.
function mapHandlers(map, keyFn, { onChange = () => {}, kind, slim = (o) => o, marks, onKeys = () => {} }) {
  return {
    reset(items) {
      if (kind) {
        for (const k of [...map.keys()]) if (k.split("/")[2] === kind) map.delete(k);
      } else {
        map.clear();
      }
      for (const o of items) {
        map.set(keyFn(o), slim(o));
        onChange(o, false);
      }
      onKeys();
      marks();
    },
    event(type, o) {
      const k = keyFn(o);
      const had = map.has(k);
      if (type === "DELETED") map.delete(k);
      else map.set(k, slim(o));
      if (had === (type === "DELETED")) onKeys();
      onChange(o, type === "DELETED");
      marks();
    },
  };
}

const markClusters = () => {
  clustersDirty = true;
  draw();
};
const markWorkloads = () => {
  workloadsDirty = detailDirty = true;
  draw();
};

// Events are not kept: the scheduling ones become timeline entries.
const eventHandlers = {
  reset(items) {
    for (const o of items) noteEvent(o);
    draw();
  },
  event(type, o) {
    if (type !== "DELETED") noteEvent(o);
    draw();
  },
};

function startWatches() {
  const ws = session.workspace;
  const base = ws ? `/clusters/${encodeURIComponent(ws)}` : "/clusters/*";
  const defs = WORKLOAD_KINDS.map(([kind, , path]) => [path.split("/").pop(), `${base}/${path}`,
    mapHandlers(workloads.get(kind), (o) => keyOf(o), {
      slim: SLIM.Workloads,
      marks: markWorkloads,
      onKeys: () => {
        keysChanged = true;
      },
    })]);
  defs.push(
    ["WorkloadPlacements", `${base}/apis/scheduling.flotilla.io/v1alpha1/workloadplacements`,
      mapHandlers(placements, (o) => keyOf(o, o.spec && o.spec.workload ? o.spec.workload.name : undefined), {
        onChange: (o, gone) => {
          if (!gone) noteAvailability(keyOf(o), o);
        },
        slim: SLIM.WorkloadPlacements,
        marks: markWorkloads,
      })],
    ["Events", `${base}/api/v1/events`, eventHandlers],
  );
  for (const [kind, path] of COMPANION_KINDS) {
    defs.push([path.split("/").pop(), `${base}/${path}?labelSelector=${encodeURIComponent(REFERENCED_LABEL)}`,
      mapHandlers(companions, (o) => `${workspaceOf(o)}/${o.metadata.namespace}/${kind}/${o.metadata.name}`,
        { kind, slim: SLIM.Companions, marks: markWorkloads })]);
  }
  if (!ws) {
    defs.unshift(["SyncTargets", "/apis/workload.flotilla.io/v1alpha1/synctargets",
      mapHandlers(clusters, (o) => o.metadata.name, {
        onChange: (o, gone) => {
          if (!gone) noteClusterReadiness(o.metadata.name, o);
        },
        marks: markClusters,
      })]);
  }
  watches = defs.map(([name, path, handlers]) => new Watch(name, path, {
    reset(items) {
      handlers.reset(name === "Events" ? items.filter((e) => SCHEDULING_REASONS.has(e.reason)) : items);
    },
    event(type, o) {
      if (name === "Events" && !SCHEDULING_REASONS.has(o.reason)) return;
      handlers.event(type, o);
    },
  }));
  for (const w of watches) w.run();
}

// ---------------------------------------------------------------- drawing

// `f`, to be called once at the next animation frame however often it is asked for
// before then.
function perFrame(f) {
  let pending = 0;
  return () => {
    if (pending) return;
    pending = requestAnimationFrame(() => {
      pending = 0;
      f();
    });
  };
}

// Asks for one drawing at the next animation frame, however many changes come first.
const draw = perFrame(() => render());

// Where the page's time goes: drawing, and taking in what the watches deliver.
const costs = {
  renders: 0, renderMs: 0, renderMaxMs: 0, chunks: 0, applyMs: 0, applyMaxMs: 0,
  clustersMs: 0, workloadsMs: 0, timelineMs: 0, detailMs: 0,
};

function render() {
  if (!session) return;
  const started = performance.now();
  try {
    renderAll();
  } finally {
    const ms = performance.now() - started;
    costs.renders += 1;
    costs.renderMs += ms;
    costs.renderMaxMs = Math.max(costs.renderMaxMs, ms);
  }
}

// Runs one part of a drawing, and counts its time.
function timed(part, f) {
  const started = performance.now();
  f();
  costs[part] = (costs[part] || 0) + performance.now() - started;
}

function renderAll() {
  if (watches.length && watches.every((w) => w.state === "live")) live = true;
  renderConnection();
  if (clustersDirty) timed("clustersMs", renderClusters);
  if (workloadsDirty) timed("workloadsMs", renderWorkloads);
  if (timelineDirty) timed("timelineMs", renderTimeline);
  if (detailDirty) timed("detailMs", renderDetail);
  clustersDirty = workloadsDirty = timelineDirty = detailDirty = false;
}

function renderConnection() {
  const down = watches.filter((w) => w.state !== "live");
  const el = $("connection");
  if (!down.length) {
    setText(el, "live");
    setAttr(el, "data-state", "live");
  } else {
    const w = down[0];
    setText(el, w.state === "connecting" ? `connecting to ${w.name}…` : `reconnecting to ${w.name}: ${w.error}`);
    setAttr(el, "data-state", w.state);
  }
}

function bar(label, used, total, text) {
  const pct = total > 0 && isFinite(used) ? Math.min(100, Math.max(0, (used / total) * 100)) : 0;
  const fill = h("span", { class: "fill" });
  fill.style.width = `${pct.toFixed(1)}%`;
  return h("div", { class: `bar${pct >= 90 ? " full" : ""}`, role: "meter", "aria-label": label,
    "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": Math.round(pct) }, fill, h("span", { class: "label" }, text));
}

function usage(st, resource, format) {
  const s = st.status || {};
  const total = quantity((s.allocatable || {})[resource]);
  const free = quantity((s.available || {})[resource]);
  const used = total - free;
  return { used, total, text: `${format(used)}/${format(total)}` };
}

const clusterRows = new Map(); // name -> { row, cells, sig }

function renderClusters() {
  const rows = $("cluster-rows");
  $("clusters-hidden").hidden = !session.workspace;
  $("cluster-table").hidden = !!session.workspace;
  if (session.workspace) {
    setText($("cluster-count"), "");
    return;
  }
  const names = [...clusters.keys()].sort();
  setText($("cluster-count"), `(${names.length})`);
  const braked = [];
  const now = serverNow();
  for (const name of names) {
    const st = clusters.get(name);
    const s = st.status || {};
    const ready = condition(st, "Ready");
    const paused = condition(st, "FailoverPaused");
    if (paused && paused.status === "True") braked.push(`${name}: ${paused.message || paused.reason || ""}`);
    const beat = Date.parse(s.lastSyncerHeartbeatTime || "");
    const cpu = usage(st, "cpu", cores);
    const mem = usage(st, "memory", bytes);
    const pods = usage(st, "pods", (n) => (isFinite(n) ? String(Math.round(n)) : "?"));
    const readyText = ready ? (ready.status === "True" ? "Ready" : `NotReady (${ready.reason || "?"})`) : "Unknown";
    const schedulable = s.schedulable || (st.spec && st.spec.unschedulable ? "Cordoned" : "True");
    const labels = Object.entries((st.metadata && st.metadata.labels) || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    const sig = JSON.stringify([readyText, s.lastSyncerHeartbeatTime, cpu.text, mem.text, pods.text, s.workloads, schedulable, labels, paused && paused.status]);
    let entry = clusterRows.get(name);
    if (!entry) {
      const cells = Array.from({ length: 9 }, () => h("td"));
      cells[0] = h("th", { scope: "row" });
      const row = h("tr", { "data-cluster": name }, cells);
      entry = { row, cells, sig: "" };
      clusterRows.set(name, entry);
    }
    const c = entry.cells;
    setText(c[2], isFinite(beat) ? age(now - beat) : "never");
    if (entry.sig !== sig) {
      entry.sig = sig;
      setText(c[0], name);
      setText(c[1], readyText);
      setAttr(entry.row, "data-ready", ready ? ready.status : "Unknown");
      setAttr(entry.row, "class", ready && ready.status === "True" ? "ready" : "not-ready");
      c[3].replaceChildren(bar(`${name} cpu used`, cpu.used, cpu.total, cpu.text));
      c[4].replaceChildren(bar(`${name} memory used`, mem.used, mem.total, mem.text));
      c[5].replaceChildren(bar(`${name} pods`, pods.used, pods.total, pods.text));
      setText(c[6], s.workloads ?? 0);
      setText(c[7], paused && paused.status === "True" ? `${schedulable}, failover paused` : schedulable);
      setText(c[8], labels);
    }
  }
  for (const [name, entry] of clusterRows) {
    if (!clusters.has(name)) {
      entry.row.remove();
      clusterRows.delete(name);
    }
  }
  // In name order, moving only what is out of place.
  let prev = null;
  for (const name of names) {
    const row = clusterRows.get(name).row;
    const want = prev ? prev.nextSibling : rows.firstChild;
    if (row !== want) rows.insertBefore(row, want);
    prev = row;
  }
  const brake = $("brake");
  brake.hidden = braked.length === 0;
  setText(brake, braked.length ? `FAILOVER PAUSED (disruption brake): ${braked.join("; ")}. Confirm a loss with \`flotilla cluster confirm-lost NAME\`.` : "");
}

// A companion's state on the clusters `assigned` to its workload: Available when every
// one of them has reported what the kind promises (a load balancer address, an
// autoscaler's replicas), Progressing while some have not, Pending when a cluster
// refused it or it is not there yet.
export function companionState(ref, obj, assigned, refusal) {
  const [kind] = ref.split("/");
  if (refusal) return { state: "Pending", why: refusal, clusters: assigned };
  if (!COMPANION_KINDS.some(([k]) => k === kind)) return { state: "Available", why: "synced", clusters: assigned };
  if (!obj) return { state: "Pending", why: "not seen yet", clusters: [] };
  const labels = (obj.metadata && obj.metadata.labels) || {};
  const annotations = (obj.metadata && obj.metadata.annotations) || {};
  const on = assigned.filter((c) => labels[SYNC_LABEL_PREFIX + c] === "Sync");
  const following = assigned.filter((c) => !on.includes(c));
  if (following.length) return { state: "Progressing", why: `following the workload to ${following.join(", ")}`, clusters: on };
  const report = (c) => {
    try {
      return JSON.parse(annotations[STATUS_ANNOTATION_PREFIX + c] || "null");
    } catch (_) {
      return null;
    }
  };
  if (kind === "Service" && !(obj.spec && obj.spec.type === "LoadBalancer")) {
    return { state: "Available", why: (obj.spec && obj.spec.type) || "ClusterIP", clusters: on };
  }
  if (kind === "Service" || kind === "Ingress") {
    const addresses = [];
    const waiting = [];
    for (const c of on) {
      const ingress = ((report(c) || {}).loadBalancer || {}).ingress || [];
      if (!ingress.length) waiting.push(c);
      for (const i of ingress) addresses.push(i.ip || i.hostname || "?");
    }
    if (waiting.length) return { state: "Progressing", why: `no load balancer address from ${waiting.join(", ")} yet`, clusters: on };
    return { state: "Available", why: addresses.join(", "), clusters: on };
  }
  let current = 0;
  let desired = 0;
  const waiting = [];
  for (const c of on) {
    const r = report(c);
    if (!r) waiting.push(c);
    else {
      current += r.currentReplicas || 0;
      desired += r.desiredReplicas || 0;
    }
  }
  if (waiting.length) return { state: "Progressing", why: `no report from ${waiting.join(", ")} yet`, clusters: on };
  return { state: "Available", why: `${current}/${desired} replicas`, clusters: on };
}

// The companions of workload `key` (`ws/ns/name`) with their states.
function companionsOf(key, wp) {
  const [ws, ns] = key.split("/");
  const refs = (wp && wp.status && wp.status.companions) || [];
  const assigned = ((wp && wp.spec && wp.spec.clusters) || []).map((c) => c.name);
  const refused = condition(wp, "CompanionsSynced");
  const refusedText = refused && refused.status === "False" ? refused.message || "" : "";
  return refs.map((ref) => {
    const refusal = refusedText.includes(ref) ? refusedText : "";
    const [kind, name] = ref.split("/");
    return { ref, ...companionState(ref, companions.get(`${ws}/${ns}/${kind}/${name}`), assigned, refusal) };
  });
}

const RANK = { Pending: 0, Progressing: 1, Available: 2 };

// One line for a workload's companions: the worst of them, or that all are well.
function companionsSummary(list) {
  if (!list.length) return { state: "", text: "" };
  const worst = list.reduce((a, b) => (RANK[b.state] < RANK[a.state] ? b : a));
  if (worst.state === "Available") return { state: "Available", text: `${list.length} available` };
  return { state: worst.state, text: `${worst.ref} ${worst.state}: ${worst.why}` };
}

// The workload at `key` and its kind: the kind its WorkloadPlacement places, when
// workloads of two kinds have its name, else the first kind that has one.
function workloadAt(key) {
  const wp = placements.get(key);
  const placed = wp && wp.spec && wp.spec.workload ? wp.spec.workload.kind : undefined;
  if (placed && workloads.has(placed) && workloads.get(placed).has(key)) return [placed, workloads.get(placed).get(key)];
  for (const [kind, map] of workloads) if (map.has(key)) return [kind, map.get(key)];
  return [placed || "Deployment", undefined];
}

function workloadCount() {
  let n = 0;
  for (const map of workloads.values()) n += map.size;
  return n;
}

// One workload as a row: what it is, where it runs, and how it is doing.
function workloadView(key) {
  const [kind] = workloadAt(key);
  const short = (WORKLOAD_KINDS.find(([k]) => k === kind) || [kind, kind])[1];
  const wp = placements.get(key);
  const [ws, ns, name] = key.split("/");
  const assigned = (wp && wp.spec && wp.spec.clusters) || [];
  // Each cluster's done/wanted as the aggregator wrote it in the summary
  // (`east=2/2 west=1/1`; a Job's succeeded/completions): the page does not count.
  const summed = new Map(((wp && wp.status && wp.status.summary) || "").split(" ").filter(Boolean).map((t) => {
    const at = t.lastIndexOf("=");
    return [t.slice(0, at), t.slice(at + 1)];
  }));
  const shares = assigned.map((c) => `${c.name} ${summed.get(c.name) || `0/${c.replicas}`}`);
  const where = assigned.map((c) => `${c.name}=${c.replicas}`).join(" ");
  // The state is the server's (the status aggregator writes it with the same rule
  // `flotilla status` uses); the page never judges it itself. Until the aggregator has
  // looked at a workload, it has no state: it is not placed yet.
  const judged = wp && wp.status && wp.status.state;
  const state = judged || "Pending";
  const why = judged ? wp.status.stateMessage || "" : "not scheduled yet";
  const companionList = companionsOf(key, wp);
  // Ready over desired, as the aggregator summed it over the clusters.
  const ready = (wp && wp.status && wp.status.ready) || "0/0";
  return { key, ws, ns, name, kind, short, ready, shares: shares.join(" · "), where, state, why, companionList,
    companions: companionsSummary(companionList) };
}

let workloadKeys = [];
let sortedKeys = [];
let keysChanged = true;
let filterText = "";
const rowPool = [];

function renderWorkloads() {
  // Sorting 10,000 names is done when names come or go, not on every change.
  if (keysChanged) {
    const keys = new Set();
    for (const map of workloads.values()) for (const k of map.keys()) keys.add(k);
    sortedKeys = [...keys].sort();
    keysChanged = false;
  }
  const all = sortedKeys;
  const f = filterText.toLowerCase();
  if (!f) {
    workloadKeys = all;
  } else {
    // A filter also matches cluster names, which change with placements: it is run
    // again on every drawing while it is set.
    workloadKeys = all.filter((k) => {
      const wp = placements.get(k);
      const where = ((wp && wp.spec && wp.spec.clusters) || []).map((c) => c.name).join(" ");
      return k.toLowerCase().includes(f) || where.includes(f);
    });
  }
  setText($("workload-count"), f ? `(${workloadKeys.length} of ${all.length})` : `(${all.length})`);
  drawVisibleRows();
}

// Draws the rows in view, reusing a pool of row elements.
function drawVisibleRows() {
  const list = $("workload-list");
  const spacer = $("workload-spacer");
  spacer.style.height = `${workloadKeys.length * ROW_HEIGHT}px`;
  setAttr(list, "aria-rowcount", workloadKeys.length);
  const first = Math.max(0, Math.floor(list.scrollTop / ROW_HEIGHT) - 5);
  const count = Math.min(workloadKeys.length - first, Math.ceil(list.clientHeight / ROW_HEIGHT) + 10);
  while (rowPool.length < count) {
    const cells = Array.from({ length: 6 }, () => h("span", { role: "cell" }));
    cells[1] = h("span", { role: "cell" }, h("small", { class: "kind" }), h("a", { href: "#" }));
    const row = h("div", { class: "vrow", role: "row" }, cells);
    list.append(row);
    rowPool.push({ row, cells });
  }
  for (let i = 0; i < rowPool.length; i++) {
    const { row, cells } = rowPool[i];
    if (i >= count) {
      row.hidden = true;
      continue;
    }
    const v = workloadView(workloadKeys[first + i]);
    row.hidden = false;
    row.style.transform = `translateY(${(first + i) * ROW_HEIGHT}px)`;
    setAttr(row, "aria-rowindex", first + i + 1);
    setAttr(row, "data-workload", v.key);
    setAttr(row, "data-clusters", v.where);
    setAttr(row, "data-state", v.state);
    setText(cells[0], v.ws);
    setAttr(row, "data-kind", v.kind);
    setText(cells[1].firstChild, `${v.short} `);
    const link = cells[1].lastChild;
    setText(link, `${v.ns}/${v.name}`);
    setAttr(link, "href", `#workload=${encodeURIComponent(v.key)}`);
    setText(cells[2], v.ready);
    setText(cells[3], v.shares || "—");
    setText(cells[4], v.why ? `${v.state}: ${v.why}` : v.state);
    setAttr(cells[4], "title", v.why || v.state);
    setText(cells[5], v.companions.text || "—");
    setAttr(cells[5], "title", v.companions.text);
    setAttr(row, "data-companions", v.companions.state);
  }
}

// The story of the last failover: times after the most recent cluster loss are shown
// as T+seconds, measured on the page's clock when both were seen live.
function sinceLoss(e, lost) {
  if (!lost || e === lost || e.at < lost.at || e.at - lost.at >= 10 * 60_000) return "";
  const ms = e.seen && lost.seen ? e.seen - lost.seen : e.at - lost.at;
  return `T+${(ms / 1000).toFixed(1)}s`;
}

const timelineItems = new Map(); // entry key -> its <li>, while it is shown

// The <li> of entry `e`, made once and then only its T+ label kept current.
function timelineItem(e, since) {
  let li = timelineItems.get(e.key);
  if (!li) {
    li = h("li", { class: e.kind, "data-kind": e.kind },
      h("time", { datetime: e.at ? new Date(e.at).toISOString() : "" }, clock(e.at)),
      h("span", { class: "since" }),
      h("span", { class: "what" }, e.text));
    timelineItems.set(e.key, li);
  }
  const label = li.children[1];
  setText(label, since);
  label.hidden = !since;
  return li;
}

// Newest first. New entries are put above the ones shown, which stay as they are; the
// list is rebuilt only when an entry arrived out of order.
function renderTimeline() {
  sortTimeline();
  const first = Math.max(0, timeline.length - TIMELINE_SHOWN);
  let lost = null;
  for (let i = 0; i < first; i++) if (timeline[i].kind === "lost") lost = timeline[i];
  const want = [];
  for (let i = first; i < timeline.length; i++) {
    const e = timeline[i];
    if (e.kind === "lost") lost = e;
    want.push(timelineItem(e, sinceLoss(e, lost)));
  }
  want.reverse();
  const list = $("timeline-list");
  const top = list.firstElementChild;
  const kept = top ? want.indexOf(top) : -1;
  const inPlace = kept >= 0 && want.slice(kept).every((li, i) => list.children[i] === li);
  if (inPlace) {
    list.prepend(...want.slice(0, kept));
    while (list.children.length > want.length) list.lastElementChild.remove();
  } else {
    list.replaceChildren(...want);
  }
  if (timelineItems.size > want.length) {
    const shown = new Set(want);
    for (const [k, li] of timelineItems) if (!shown.has(li)) timelineItems.delete(k);
  }
  if (unshown.length) {
    const now = performance.timeOrigin + performance.now();
    for (const k of unshown) if (!shownAt.has(k)) shownAt.set(k, now);
    unshown = [];
    if (shownAt.size > 20_000) for (const k of [...shownAt.keys()].slice(0, shownAt.size - 20_000)) shownAt.delete(k);
  }
}

// The explanation of the workload on its page: asked for when the page opens and
// again when its placement changes, at most once a second.
const explained = { key: null, placement: null, asked: 0, timer: 0 };

async function explainWorkload(key) {
  const [ws, ns, name] = key.split("/");
  const out = $("detail-explain");
  if (session.workspace) {
    setText(out, "Why a workload runs where it runs shows the fleet's clusters: sign in with the admin's link (flotilla dashboard) to see it.");
    return;
  }
  try {
    const resp = await fetch(`/clusters/${encodeURIComponent(ws)}/dashboard/explain/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`,
      { headers: headers(), cache: "no-store" });
    if (!resp.ok) throw new Error(await statusMessage(resp));
    const body = await resp.json();
    if (explained.key === key) setText(out, body.text || `It cannot be explained: ${body.error}`);
  } catch (e) {
    if (explained.key === key) setText(out, `The explanation could not be read: ${e.message}`);
  }
}

function maybeExplain(key) {
  const wp = placements.get(key);
  const placement = JSON.stringify(wp ? [wp.spec, (condition(wp, "Scheduled") || {}).message] : null);
  if (explained.key === key && explained.placement === placement) return;
  if (explained.key !== key) setText($("detail-explain"), "asking the scheduler's core…");
  explained.key = key;
  explained.placement = placement;
  clearTimeout(explained.timer);
  const wait = Math.max(0, explained.asked + 1000 - Date.now());
  explained.timer = setTimeout(() => {
    explained.asked = Date.now();
    explainWorkload(key);
  }, wait);
}

function renderDetail() {
  const m = /^#workload=(.+)$/.exec(location.hash);
  const detail = $("detail");
  const key = m ? decodeURIComponent(m[1]) : null;
  detail.hidden = !key;
  document.querySelector(".columns").hidden = !!key;
  $("clusters").hidden = !!key;
  if (!key) {
    explained.key = null;
    return;
  }
  maybeExplain(key);
  const v = workloadView(key);
  const [, d] = workloadAt(key);
  const wp = placements.get(key);
  setText($("detail-title"), `${v.kind} ${v.ns}/${v.name} in workspace ${v.ws}`);
  const summary = [
    ["State", v.why ? `${v.state}: ${v.why}` : v.state],
    ["Ready", v.ready],
    ["Placement", wp && wp.spec ? wp.spec.placement : "not scheduled yet"],
    ["Why here", (condition(wp, "Scheduled") || {}).message || ""],
    ["Exists", d ? "yes" : "deleted"],
  ];
  $("detail-summary").replaceChildren(...summary.flatMap(([k, val]) => [h("dt", {}, k), h("dd", {}, val)]));
  const statusOf = new Map(((wp && wp.status && wp.status.clusters) || []).map((c) => [c.name, c]));
  const names = new Set([...((wp && wp.spec && wp.spec.clusters) || []).map((c) => c.name), ...statusOf.keys()]);
  const assigned = new Map(((wp && wp.spec && wp.spec.clusters) || []).map((c) => [c.name, c.replicas]));
  $("detail-clusters").replaceChildren(...[...names].sort().map((n) => {
    const s = statusOf.get(n) || {};
    return h("tr", { "data-cluster": n }, h("th", { scope: "row" }, n), h("td", {}, assigned.has(n) ? assigned.get(n) : "no longer"),
      h("td", {}, s.readyReplicas || 0), h("td", {}, s.availableReplicas || 0), h("td", {}, s.syncedGeneration ?? ""),
      h("td", {}, s.lastSyncTime || ""));
  }));
  $("detail-companions").replaceChildren(...v.companionList.map((c) => h("tr", { "data-companion": c.ref, "data-state": c.state },
    h("th", { scope: "row" }, c.ref), h("td", { class: `state-${c.state}` }, c.state), h("td", {}, c.clusters.join(", ")),
    h("td", {}, c.why))));
  if (!v.companionList.length) $("detail-companions").replaceChildren(h("tr", {}, h("td", { colspan: 4 }, "none")));
  const conds = (wp && wp.status && wp.status.conditions) || [];
  $("detail-conditions").replaceChildren(...conds.map((c) => h("tr", {}, h("th", { scope: "row" }, c.type), h("td", {}, c.status),
    h("td", {}, c.reason || ""), h("td", {}, c.message || ""), h("td", {}, c.lastTransitionTime || ""))));
  const mine = timeline.filter((e) => e.workload === key).slice(-50).reverse();
  $("detail-events").replaceChildren(...mine.map((e) => h("li", { class: e.kind },
    h("time", { datetime: new Date(e.at).toISOString() }, clock(e.at)), h("span", { class: "what" }, e.text))));
}

// ---------------------------------------------------------------- start

function startBoard() {
  $("sign-in").hidden = true;
  $("board").hidden = false;
  $("sign-out").hidden = false;
  setText($("scope"), session.workspace ? `workspace ${session.workspace}` : "all workspaces");
  startWatches();
  // Ages move with the clock, not with the data.
  setInterval(() => {
    clustersDirty = true;
    draw();
  }, 1000);
  draw();
}

function showSignIn() {
  $("board").hidden = true;
  $("sign-in").hidden = false;
  const why = sessionStorage.getItem("flotilla.dashboard.why");
  if (why) {
    sessionStorage.removeItem("flotilla.dashboard.why");
    setText($("sign-in-error"), why);
  }
  $("token").focus();
}

async function main() {
  $("sign-in-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = $("token").value.trim();
    setText($("sign-in-error"), "");
    try {
      await signIn(token);
      $("token").value = "";
    } catch (err) {
      const what = err instanceof Refused ? "The server refused this token" : "Signing in failed";
      setText($("sign-in-error"), `${what}: ${err.message}`);
    }
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  $("filter").addEventListener("input", (e) => {
    filterText = e.target.value.trim();
    workloadsDirty = true;
    draw();
  });
  $("workload-list").addEventListener("scroll", () => drawVisibleRowsSoon());
  window.addEventListener("resize", () => drawVisibleRowsSoon());
  window.addEventListener("hashchange", () => {
    // A sign-in link opened in this tab starts over with it.
    if (location.hash.startsWith("#signin=")) {
      location.reload();
      return;
    }
    detailDirty = true;
    draw();
  });

  // A sign-in link carries its token after `#signin=`: the fragment never reaches a
  // server, and it is taken off the address at once.
  const link = /^#signin=([A-Za-z0-9.*_-]+)$/.exec(location.hash);
  if (link) {
    history.replaceState(null, "", location.pathname);
    try {
      await signIn(link[1]);
    } catch (err) {
      showSignIn();
      setText($("sign-in-error"), `The sign-in link was refused: ${err.message}`);
    }
    return;
  }
  const s = storedSession();
  if (s) {
    keepSession(s);
    startBoard();
  } else {
    showSignIn();
  }
}

// Scrolling and resizing draw the rows in view again, once a frame.
const drawVisibleRowsSoon = perFrame(() => drawVisibleRows());

// Read-only numbers about the page, for diagnosis and the benchmark harness.
window.flotillaDashboard = Object.freeze({
  shownAt: (eventKey) => shownAt.get(eventKey),
  counts: () => ({ clusters: clusters.size, workloads: workloadCount(), placements: placements.size,
    companions: companions.size, timeline: timeline.length, rowsInDom: rowPool.length }),
  // With `reset`, the account starts again from zero.
  costs: (reset) => {
    const now = { ...costs };
    if (reset) for (const k of Object.keys(costs)) costs[k] = 0;
    return now;
  },
});

main();
