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
      var action = b.dataset.action, query = bulk.dataset.query;
      api("POST", "/api/v1/jobs/bulk", { action: action, query: query, dry_run: true }).then(function (dry) {
        if (dry.matched === 0) { prog.hidden = false; text.textContent = "No jobs match: nothing to " + action + "."; busy = false; return; }
        var what = dry.matched === 1 ? "1 job" : dry.matched + " jobs";
        if (!confirm(verbs[action][0] + " " + what + " that this filter selects?" +
          (action === "purge" ? " Their records are deleted (their events stay in the log)." : ""))) { busy = false; return; }
        return api("POST", "/api/v1/jobs/bulk", { action: action, query: query, reason: action + " from the dashboard" }).then(function (op) {
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
})();
