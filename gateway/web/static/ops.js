// jetflow dashboard, the operator's pages: bulk actions on what a list's
// filter selects, and a fan-out's pieces one by one. app.js keeps the
// pages live (and holds updates while paused); charts.js draws the charts.
(function () {
  "use strict";
  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function api(method, url, body) {
    return fetch(url, {
      method: method, headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: body ? JSON.stringify(body) : undefined
    }).then(function (r) {
      return r.json().then(function (j) { if (!r.ok) throw j; return j; });
    });
  }

  // The failures page is as it was loaded (no live stream): say so.
  var live = document.getElementById("live");
  if (live && document.body.dataset.page === "failures") { live.textContent = "as loaded"; live.className = "live"; }

  // Bulk actions: a dry run says how many jobs the filter selects, the
  // confirmation says it again, then the operation's progress is shown
  // until it ends.
  var bulk = document.getElementById("bulk");
  if (bulk) {
    var prog = document.getElementById("bulk-progress"), bar = prog.querySelector("progress"), text = prog.querySelector(".bulk-text");
    var verbs = { retry: ["Retry", "retried"], cancel: ["Cancel", "cancelled"], purge: ["Purge", "purged"] };
    var busy = false;
    var show = function (op) {
      prog.hidden = false;
      bar.max = Math.max(op.matched, 1);
      bar.value = op.done;
      var v = verbs[op.action][1];
      text.textContent = op.changed + " " + v + ", " + op.skipped + " skipped, " + op.failed + " failed of " + op.matched +
        (op.state === "running" ? "…" : op.state === "done" ? " (done)" : " (" + op.state + ")") +
        (op.errors && op.errors.length ? ": " + op.errors[0] : "");
      prog.dataset.state = op.state;
      prog.dataset.changed = op.changed;
    };
    var follow = function (id) {
      api("GET", "/api/v1/bulk/" + encodeURIComponent(id)).then(function (op) {
        show(op);
        if (op.state === "running") { setTimeout(function () { follow(id); }, 300); return; }
        busy = false;
        if (op.action !== "cancel") setTimeout(function () { location.reload(); }, 1500);
      }).catch(function (p) { busy = false; text.textContent = p.detail || "the operation's progress is not known"; });
    };
    bulk.addEventListener("click", function (ev) {
      var b = ev.target.closest("button.bulk-btn");
      if (!b || busy) return;
      busy = true;
      var action = b.dataset.action, query = bulk.dataset.query, pieces = !!b.dataset.pieces;
      api("POST", "/api/v1/jobs/bulk", { action: action, query: query, dry_run: true }).then(function (dry) {
        if (dry.matched === 0) { prog.hidden = false; text.textContent = "No jobs match: nothing to " + action + "."; busy = false; return; }
        var what = dry.matched === 1 ? "1 job" : dry.matched + " jobs";
        var ask = pieces ? "Retry the failed pieces of the fan-outs among " + what + " that this filter selects? The other jobs are skipped." :
          verbs[action][0] + " " + what + " that this filter selects?" +
          (action === "purge" ? " Their records are deleted (their events stay in the log)." : "");
        if (!confirm(ask)) { busy = false; return; }
        var body = { action: action, query: query, reason: action + " from the dashboard" };
        if (pieces) body.failed_pieces = true;
        return api("POST", "/api/v1/jobs/bulk", body).then(function (op) {
          show(op);
          follow(op.id);
        });
      }).catch(function (p) { busy = false; prog.hidden = false; text.textContent = p.detail || "refused"; });
    });
  }

  // A fan-out's pieces, a page at a time, filtered by state.
  var pieces = document.getElementById("pieces");
  if (pieces) {
    var tbody = document.querySelector("#pieces-table tbody"), more = document.getElementById("pieces-more");
    var note = document.getElementById("pieces-note");
    var state = "", after = 0, loading = false;
    var row = function (p) {
      var tr = document.createElement("tr");
      tr.dataset.piece = p.piece;
      tr.dataset.state = p.state;
      var label = p.job_id ? '<a href="/jobs/' + esc(p.job_id) + '">' + p.piece + "</a>" : String(p.piece);
      var err = p.error ? (p.error.code ? "<code>" + esc(p.error.code) + "</code> " : "") + esc(p.error.message) : "";
      if (p.carried_from) err = 'carried over from <a href="/jobs/' + esc(p.carried_from) + '">' + esc(p.carried_from) + "</a>";
      tr.innerHTML = '<td class="num">' + label + '</td><td><span class="badge st-' + esc(p.state === "unfinished" ? "queued" : p.state) +
        '">' + esc(p.state) + "</span></td><td>" + (p.time ? '<time datetime="' + esc(p.time) + '">' + esc(p.time.replace("T", " ").replace(/\.\d+Z$|Z$/, "")) + "</time>" : "") +
        '</td><td class="num">' + (p.attempt || "") + '</td><td class="emsg">' + err + "</td>";
      return tr;
    };
    var load = function (reset) {
      if (loading) return;
      loading = true;
      if (reset) { after = 0; tbody.innerHTML = ""; }
      var q = new URLSearchParams({ limit: "50" });
      if (after) q.set("after", after);
      if (state) q.set("state", state);
      api("GET", "/api/v1/jobs/" + encodeURIComponent(pieces.dataset.parent) + "/pieces?" + q.toString()).then(function (l) {
        l.pieces.forEach(function (p) { tbody.appendChild(row(p)); });
        after = l.next_after || 0;
        more.hidden = !l.next_after;
        note.textContent = tbody.rows.length + (state ? " " + state : "") + " shown of " + l.total + " " + (l.kind || "pieces");
        pieces.dataset.loaded = (+pieces.dataset.loaded || 0) + 1;
      }).catch(function (p) { note.textContent = p.detail || "the pieces could not be read"; })
        .then(function () { loading = false; });
    };
    pieces.querySelector(".piece-filter").addEventListener("click", function (ev) {
      var a = ev.target.closest("a[data-state]");
      if (!a) return;
      ev.preventDefault();
      pieces.querySelectorAll(".piece-filter a").forEach(function (x) { x.classList.toggle("sel", x === a); });
      state = a.dataset.state;
      load(true);
    });
    more.addEventListener("click", function () { load(false); });
    load(true);
  }

  // A workflow's steps as a graph, live: a column per layer (a step is one
  // layer right of its deepest dependency), a box per step in its status's
  // colour, linking to its job, and a line from each dependency. Past
  // maxGraphSteps, a table of each layer's steps by status instead.
  var wfSec = document.getElementById("workflow");
  if (wfSec) {
    var maxGraphSteps = 400, boxW = 150, boxH = 30, gapX = 56, gapY = 10;
    var graph = document.getElementById("wf-graph"), wfNote = document.getElementById("wf-note");
    var wfCounts = document.getElementById("wf-counts");
    var terminal = { succeeded: 1, failed: 1, cancelled: 1 };
    var statusClass = function (s) { return "st-" + (s === "skipped" ? "cancelled" : s === "missing" ? "pending" : s); };
    var drawWf = function (wf) {
      var byName = {};
      wf.steps.forEach(function (s) { byName[s.name] = s; });
      var counts = Object.keys(wf.counts || {}).sort().map(function (k) { return wf.counts[k] + " " + k; });
      wfCounts.textContent = wf.steps.length + " steps · " + counts.join(" · ");
      wfSec.dataset.state = wf.state;
      if (wf.steps.length > maxGraphSteps) {
        var rows = wf.layers.map(function (names, i) {
          var by = {};
          names.forEach(function (n) { var st = byName[n] ? byName[n].status : "missing"; by[st] = (by[st] || 0) + 1; });
          return "<tr><td class=\"num\">" + i + "</td><td class=\"num\">" + names.length + "</td><td>" +
            Object.keys(by).sort().map(function (k) { return '<span class="badge ' + statusClass(k) + '">' + esc(k) + "</span> " + by[k]; }).join(" ") + "</td></tr>";
        });
        graph.innerHTML = '<table class="jobs" id="wf-layers"><thead><tr><th class="num">Layer</th><th class="num">Steps</th><th>By status</th></tr></thead><tbody>' + rows.join("") + "</tbody></table>";
        wfNote.textContent = "more than " + maxGraphSteps + " steps: each layer's steps by status (jetflow workflow get " + wf.id + " lists them)";
        return;
      }
      var pos = {}, height = 0;
      wf.layers.forEach(function (names, x) {
        names.forEach(function (n, y) { pos[n] = { x: x * (boxW + gapX), y: y * (boxH + gapY) }; });
        height = Math.max(height, names.length * (boxH + gapY));
      });
      var width = wf.layers.length * (boxW + gapX) - gapX;
      var lines = [];
      wf.steps.forEach(function (s) {
        (s.depends_on || []).forEach(function (d) {
          var a = pos[d], b = pos[s.name];
          if (!a || !b) return;
          lines.push('<path d="M' + (a.x + boxW) + " " + (a.y + boxH / 2) + " C" + (a.x + boxW + gapX / 2) + " " + (a.y + boxH / 2) + " " +
            (b.x - gapX / 2) + " " + (b.y + boxH / 2) + " " + b.x + " " + (b.y + boxH / 2) + '" data-from="' + esc(d) + '" data-to="' + esc(s.name) + '"/>');
        });
      });
      var boxes = wf.steps.map(function (s) {
        var p = pos[s.name] || { x: 0, y: 0 };
        var inner = '<span class="wf-name">' + esc(s.name) + '</span> <span class="wf-status">' + esc(s.status) + (s.carried ? " (carried)" : "") + "</span>";
        var attrs = ' class="wf-step ' + statusClass(s.status) + '" data-step="' + esc(s.name) + '" data-status="' + esc(s.status) + '" data-x="' + p.x + '" data-y="' + p.y + '" title="' + esc(s.type) + (s.depends_on && s.depends_on.length ? " after " + esc(s.depends_on.join(", ")) : "") + '"';
        return s.id && s.status !== "missing" ? "<a" + attrs + ' href="/jobs/' + esc(s.id) + '">' + inner + "</a>" : "<span" + attrs + ">" + inner + "</span>";
      });
      graph.innerHTML = '<div class="wf-canvas"><svg class="wf-edges" width="' + width + '" height="' + height + '">' +
        lines.join("") + "</svg>" + boxes.join("") + "</div>";
      // Placed through the CSSOM: the page's policy allows no style attributes.
      var canvas = graph.firstChild;
      canvas.style.width = width + "px";
      canvas.style.height = height + "px";
      graph.querySelectorAll(".wf-step").forEach(function (el) {
        el.style.left = el.dataset.x + "px";
        el.style.top = el.dataset.y + "px";
        el.style.width = boxW + "px";
        el.style.height = boxH + "px";
      });
      wfNote.textContent = terminal[wf.state] ? "" : "live: updated every 2 s";
    };
    var loadWf = function () {
      api("GET", "/api/v1/workflows/" + encodeURIComponent(wfSec.dataset.id)).then(function (wf) {
        drawWf(wf);
        wfSec.dataset.loaded = (+wfSec.dataset.loaded || 0) + 1;
        if (!terminal[wf.state]) setTimeout(loadWf, 2000);
      }).catch(function (p) { wfNote.textContent = p.detail || "the workflow could not be read"; setTimeout(loadWf, 5000); });
    };
    loadWf();
  }
})();
