// The management page: polls /ui/api/state twice a second and redraws. Every value from the
// node goes into the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 500;
let state = null;
let failures = 0;

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function short(name) { return String(name).split("@")[0]; }

function clock(seconds) {
  const d = new Date(seconds * 1000);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function replace(container, ...children) {
  container.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

// ---------------------------------------------------------------- talking to the node

async function poll() {
  try {
    const response = await fetch("api/state", { headers: { Accept: "application/json" } });
    if (response.status === 401) {
      live("logged out: run `rabbitry cluster ui` again", false);
      stale("Your session has ended. Run `rabbitry cluster ui --control ... --cookie-file ...` for a new login link.");
      return; // stop polling
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    state = await response.json();
    failures = 0;
    render(state);
    live("live, updated " + clock(state.now), true);
    stale(null);
  } catch (error) {
    failures += 1;
    live("no answer from the node", false);
    if (failures > 2) stale(`The node does not answer (${error.message}); what you see may be out of date.`);
  }
  setTimeout(poll, POLL_MS);
}

async function act(body, what) {
  const response = await fetch("api/action", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => ({}));
  if (response.ok) toast(`${what}: done`, false);
  else toast(`${what}: ${answer.error || "HTTP " + response.status}`, true);
}

function confirmThen(title, text, body, what) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  dialog.returnValue = "";
  dialog.onclose = () => { if (dialog.returnValue === "ok") act(body, what); };
  dialog.showModal();
}

function live(text, ok) {
  const node = $("live");
  node.textContent = text;
  node.className = "live " + (ok ? "ok" : "bad");
}

function stale(text) {
  $("stale").hidden = !text;
  $("stale-text").textContent = text || "";
}

function toast(text, bad) {
  const node = $("toast");
  node.textContent = text;
  node.className = bad ? "bad" : "";
  node.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { node.hidden = true; }, 6000);
}

// ---------------------------------------------------------------- drawing

function render(s) {
  $("node").textContent = s.node;
  $("cluster").textContent = `cluster ${s.cluster} · rabbitry ${s.version}`;
  document.title = `rabbitry · ${short(s.node)}${s.cut.length || hasPartitions(s) ? " · PARTITION" : ""}`;
  renderBanner(s);
  renderMembers(s);
  renderTree(s);
  renderLog($("reports"), s.reports.map((r) => [r.at, r.event, `${r.supervisor}${r.child ? "/" + r.child : ""}${r.reason ? ": " + r.reason : ""}`]));
  renderLog($("timeline"), s.timeline.map((e) => [e.at, e.kind, [e.node, e.detail].filter(Boolean).join(" ")]));
  renderGossip(s);
  renderFailover(s);
  renderMnesia(s);
  renderSingletons(s);
}

function hasPartitions(s) {
  return Object.values(s.partitions).some((list) => list.length > 0);
}

function renderBanner(s) {
  const rows = new Map();
  for (const cut of s.cut) rows.set(cut.node, { cut: cut.cannot_see, was: [] });
  for (const [node, list] of Object.entries(s.partitions)) {
    if (!list.length) continue;
    const row = rows.get(node) || { cut: [], was: [] };
    row.was = list;
    rows.set(node, row);
  }
  $("partition-banner").hidden = rows.size === 0;
  replace($("partition-rows"), [...rows.entries()].sort().map(([node, row]) =>
    el("tr", { "data-node": node },
      el("td", {}, node),
      el("td", {}, row.cut.join(", ") || "—"),
      el("td", {}, row.was.join(", ") || "—"))));
  const ticks = Object.entries(s.net_ticktimes);
  const distinct = new Set(ticks.map(([, t]) => t));
  $("ticktime-warning").hidden = distinct.size < 2;
  $("ticktimes").textContent = ticks.map(([n, t]) => `${n}: ${t} s`).join(", ");
  const modes = (s.partition_modes && s.partition_modes.modes) || {};
  $("mode-warning").hidden = !(s.partition_modes && s.partition_modes.differ);
  $("modes").textContent = Object.entries(modes)
    .map(([n, m]) => `${n}: ${JSON.stringify(m)}`).join(", ");
  $("paused-notice").hidden = !s.paused;
}

function renderMembers(s) {
  const body = $("members").tBodies[0];
  replace(body, s.members.map((m) => {
    const forget = m.role === "core" && m.state === "down" && !m.self
      ? el("button", { type: "button", on: { click: () => confirmThen(
        `Forget ${m.name}?`,
        `${m.name} will be removed from the cluster's membership. Do this only for a node that is gone for good; it must be stopped.`,
        { action: "forget", node: m.name }, `forget ${m.name}`) } }, "Forget…")
      : null;
    return el("tr", { "data-node": m.name, "data-state": m.state },
      el("td", {}, m.name, " ", m.self ? el("span", { class: "tag me" }, "this node") : null,
        !m.reachable && !m.self ? el("span", { class: "muted" }, " (not reachable from here)") : null),
      el("td", {}, m.role),
      el("td", { class: `state ${m.state}` }, m.state),
      el("td", {}, m.alarms.length ? m.alarms.map((a) => el("span", { class: "tag alarm" }, `${a} alarm`)) : el("span", { class: "muted" }, "none")),
      el("td", {}, m.net_ticktime ? `${m.net_ticktime} s` : "—"),
      el("td", {}, forget));
  }));
}

function renderTree(s) {
  const tree = $("tree");
  if (!s.supervision) { replace(tree, el("p", { class: "muted" }, "The supervision tree did not answer in time.")); return; }
  replace(tree, s.supervision.map((sup) => {
    const title = el("h3", {}, sup.path.length ? sup.path.join(" / ") : `${sup.supervisor} (root)`,
      sup.gave_up ? el("span", { class: "tag alarm" }, ` gave up ${sup.gave_up}×`) : null);
    if (!sup.answered) return el("div", { class: "sup" }, title, el("p", { class: "muted" }, "busy: did not answer in time"));
    const restartable = sup.path.length > 0 && sup.path[0] === "app";
    return el("div", { class: "sup", "data-supervisor": sup.supervisor }, title,
      el("table", {},
        el("thead", {}, el("tr", {}, el("th", {}, "Child"), el("th", {}, "Type"), el("th", {}, "State"), el("th", {}, "Restarts"), el("th", {}, ""))),
        el("tbody", {}, sup.children.map((c) => el("tr", { "data-child": c.id },
          el("td", {}, c.id),
          el("td", {}, c.type),
          el("td", { class: `state ${c.state}` }, c.state),
          el("td", {}, c.restarts),
          el("td", {}, restartable && c.id ? el("button", { type: "button", on: { click: () => confirmThen(
            `Restart ${c.id}?`,
            `${sup.path.join(" / ")} will stop ${c.id} and start it again (terminate_child, then restart_child).`,
            { action: "restart_child", path: sup.path, child: c.id }, `restart ${c.id}`) } }, "Restart…") : null))))));
  }));
}

function renderLog(list, rows) {
  if (!rows.length) { replace(list, el("li", { class: "muted" }, "nothing yet")); return; }
  replace(list, rows.map(([at, kind, text]) =>
    el("li", {}, el("time", {}, clock(at)), el("span", { class: `kind ${kind}` }, kind), text)));
}

function dl(container, pairs) {
  replace(container, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function renderGossip(s) {
  const g = s.gossip;
  if (!s.has_gossip) { dl($("gossip"), [["gossip", "off (no bus: in the config)"]]); return; }
  if (!g) { dl($("gossip"), [["gossip", "did not answer in time"]]); return; }
  const e = g.elections || {};
  dl($("gossip"), [
    ["alive workers", (g.alive || []).join(", ") || "none"],
    ["clock", g.clock],
    ["revoked", g.revoked],
    ["bus", g.connected ? "connected" : "disconnected"],
    ["elections pending", (e.pending || []).join(", ") || "none"],
    ["elections decided", e.decided ?? "—"],
    ["last elections", (e.last || []).map((r) => `${r.id}: ${short(r.winner)}`).join(", ") || "none"],
  ]);
}

function renderFailover(s) {
  const box = $("failover");
  if (s.failover === null) { replace(box, el("p", { class: "muted" }, "did not answer in time")); return; }
  if (!s.failover.length) { replace(box, el("p", { class: "muted" }, "No failover server or client runs on this node.")); return; }
  replace(box, s.failover.map((f) => {
    const last = f.last_switch;
    const pairs = [
      ["system", `${f.system} (${f.role === "server" ? "RCS" : "RCC"})`],
      ["master", f.redis_master || f.master || "none"],
    ];
    if (f.role === "server") {
      pairs.push(["active", f.active ? `yes, term ${f.term}` : "no (standby)"]);
      pairs.push(["phase", f.phase]);
      pairs.push(["last switch", last ? `${last.from} → ${last.to} at ${clock(last.at)}, took ${last.took.toFixed(1)} s` : "none"]);
    }
    pairs.push(["switches", f.switches ?? 0]);
    const box2 = el("dl");
    dl(box2, pairs);
    return box2;
  }));
}

function renderMnesia(s) {
  const box = $("mnesia");
  if (!s.has_mnesia) { replace(box, el("p", { class: "muted" }, "off (no mnesia: in the config)")); return; }
  const m = s.mnesia;
  if (!m) { replace(box, el("p", { class: "muted" }, "did not answer in time")); return; }
  const tables = Object.entries(m.tables || {});
  replace(box,
    el("dl", {}, el("dt", {}, "running db nodes"), el("dd", {}, (m.running_db_nodes || []).join(", "))),
    el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "Table"), el("th", {}, "Copies"), el("th", {}, "Active"), el("th", {}, "Size"))),
      el("tbody", {}, tables.map(([name, t]) => el("tr", {},
        el("td", {}, name), el("td", {}, t.all.map(short).join(", ")),
        el("td", {}, t.active.map(short).join(", ")), el("td", {}, t.size ?? "—"))))));
}

function renderSingletons(s) {
  const box = $("singletons");
  const st = s.singletons;
  if (!st) { replace(box, el("p", { class: "muted" }, "did not answer in time")); return; }
  const rows = Object.entries(st.singletons || {});
  if (!rows.length) { replace(box, el("p", { class: "muted" }, "No singleton: true child in the application tree.")); return; }
  replace(box,
    el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "Singleton"), el("th", {}, "Runs on"), el("th", {}, "Token"), el("th", {}, "Lease left"))),
      el("tbody", {}, rows.map(([name, e]) => el("tr", {},
        el("td", {}, name),
        el("td", {}, e.node ? short(e.node) : "nowhere now"),
        el("td", {}, e.token ?? "—"),
        el("td", {}, e.expires ? `${Math.max(0, e.expires - s.now).toFixed(1)} s` : "—"))))),
    el("p", { class: "muted" }, `${st.moves} started here; fencing tokens up to ${st.max_token}`));
}

// ---------------------------------------------------------------- wiring

document.addEventListener("DOMContentLoaded", () => {
  $("join-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    const node = form.get("node"), address = form.get("address");
    confirmThen(`Join the cluster of ${node}?`,
      `This node (${state ? state.node : ""}) will join ${node}'s cluster, reached at ${address}.`,
      { action: "join", node, address }, `join ${node}`);
  });
  $("leave").addEventListener("click", () => confirmThen("Leave the cluster?",
    `This node (${state ? state.node : ""}) will leave its cluster and become a cluster of one.`,
    { action: "leave" }, "leave"));
  $("logout").addEventListener("click", async () => {
    await fetch("logout", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    live("logged out", false);
    stale("You logged out. Run `rabbitry cluster ui` for a new login link.");
  });
  poll();
});
