// jetflow dashboard: live updates over Server-Sent Events. No framework, no
// build step; the server renders every page, this script keeps it current.
(function () {
  "use strict";
  var STATES = ["pending", "scheduled", "queued", "claimed", "running", "waiting", "succeeded", "failed", "cancelled"];
  var TERMINAL = { succeeded: 1, failed: 1, cancelled: 1 };
  var page = document.body.dataset.page;
  var live = document.getElementById("live");

  // The namespace every page shows ("": all) is the page's ?namespace=,
  // remembered in this browser: a page opened without one shows the last
  // chosen (a job's page shows its job, whatever the namespace).
  var NS_KEY = "jetflow.namespace";
  var ns = document.body.dataset.namespace || "";
  function remember(v) {
    try { if (v) localStorage.setItem(NS_KEY, v); else localStorage.removeItem(NS_KEY); } catch (e) { /* storage off */ }
  }
  function remembered() {
    try { return localStorage.getItem(NS_KEY) || ""; } catch (e) { return ""; }
  }
  var params = new URLSearchParams(location.search);
  var listPage = page !== "job" && page !== "notfound";
  if (params.has("namespace")) {
    remember(ns); // as the server took it: one it refused is forgotten
  } else if (listPage && remembered()) {
    params.set("namespace", remembered());
    location.replace(location.pathname + "?" + params.toString());
    return;
  }
  var nsSelect = document.getElementById("ns-select");
  if (nsSelect) {
    nsSelect.addEventListener("change", function () {
      remember(nsSelect.value);
      var q = new URLSearchParams(listPage ? location.search : "");
      q.delete("cursor"); // a page of another namespace's list
      if (nsSelect.value) q.set("namespace", nsSelect.value); else q.delete("namespace");
      var path = listPage ? location.pathname : "/";
      location.href = path + (q.toString() ? "?" + q.toString() : "");
    });
  }
  // streamURL is the live stream of this page's namespace, with query q.
  function streamURL(q) {
    if (ns) q.set("namespace", ns);
    return "/api/v1/stream?" + q.toString();
  }

  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function clock(iso) { return iso ? iso.replace("T", " ").replace(/\.\d+Z$|Z$/, "") : ""; }
  function secs(f) {
    if (f == null) return "";
    if (f < 1) return Math.round(f * 1000) + "ms";
    if (f < 60) return f.toFixed(2) + "s";
    if (f < 3600) return Math.floor(f / 60) + "m" + String(Math.floor(f % 60)).padStart(2, "0") + "s";
    return Math.floor(f / 3600) + "h" + String(Math.floor(f % 3600 / 60)).padStart(2, "0") + "m";
  }
  // goDuration writes seconds as Go's time.Duration does ("1m30s"), as the
  // server-rendered pages do.
  function goDuration(f) {
    var h = Math.floor(f / 3600), m = Math.floor(f % 3600 / 60), s = Math.round((f % 60) * 1e6) / 1e6;
    return (h ? h + "h" : "") + (h || m ? m + "m" : "") + s + "s";
  }
  function ago(iso) {
    var d = (Date.now() - Date.parse(iso)) / 1000;
    if (isNaN(d)) return "";
    if (d < 0) return "in " + secs(-d).replace(/\.\d+s$/, "s");
    if (d < 2) return "just now";
    if (d < 60) return Math.floor(d) + "s ago";
    if (d < 3600) return Math.floor(d / 60) + "m ago";
    if (d < 86400) return Math.floor(d / 3600) + "h ago";
    return clock(iso);
  }
  function relTimes() {
    document.querySelectorAll("time[datetime]").forEach(function (t) {
      if (!t.title) t.title = clock(t.getAttribute("datetime")) + " UTC";
      t.textContent = ago(t.getAttribute("datetime"));
    });
  }
  relTimes();
  setInterval(relTimes, 5000);

  function badge(state) { return '<span class="badge st-' + esc(state) + '">' + esc(state) + "</span>"; }
  // A progress bar only while the job can still move (dashboard.go's
  // showProgress): a finished job's last report is stale.
  function showProgress(state, p) { return !!p && !TERMINAL[state]; }
  function progressCell(p, state) {
    if (!showProgress(state, p)) return "";
    var v = p.percent != null ? ' value="' + p.percent + '"' : "";
    return '<progress class="small" max="100"' + v + ' title="' + esc(p.current + "/" + p.total + " " + (p.message || "")) + '"></progress>';
  }
  function rowHTML(s) {
    return '<td class="state">' + badge(s.state) + "</td>" +
      '<td class="id"><a href="/jobs/' + esc(s.id) + '">' + esc(s.id) + "</a></td>" +
      '<td class="type">' + esc(s.type) + "</td>" +
      '<td class="ns">' + esc(s.namespace) + "</td>" +
      '<td class="queue">' + esc(s.queue) + "</td>" +
      '<td class="attempts num">' + esc(s.attempts) + "</td>" +
      '<td class="progress">' + progressCell(s.progress, s.state) + "</td>" +
      '<td class="created"><time datetime="' + esc(s.created_at) + '">' + esc(ago(s.created_at)) + "</time></td>" +
      '<td class="duration num">' + esc(secs(s.duration_seconds)) + "</td>" +
      '<td class="worker">' + esc(s.worker || "") + "</td>";
  }
  function setRow(tr, s) {
    var was = tr.dataset.state;
    tr.innerHTML = rowHTML(s);
    tr.dataset.state = s.state;
    if (was && was !== s.state) flash(tr);
  }
  function flash(el) {
    el.classList.remove("flash");
    void el.offsetWidth;
    el.classList.add("flash");
  }

  // Live without chaos: the Pause button holds every live update until
  // Resume, and while the pointer is on a list of jobs its rows do not
  // move under it; what came meanwhile is applied at once afterwards (a
  // reload past maxHeld).
  var pausedByButton = false, hovering = false, held = [], heldOverflow = false, maxHeld = 5000;
  function isPaused() { return pausedByButton || hovering; }
  window.jetflowPaused = isPaused;
  // jetflowHeld names what is held: "event:id:state" for a job's update.
  window.jetflowHeld = function () { return held.map(function (h) { return h.what; }); };
  var pauseBtn = null;
  function showPause() {
    if (!pauseBtn) return;
    pauseBtn.textContent = pausedByButton ? "Resume" + (held.length ? " (" + held.length + ")" : "") : "Pause";
    pauseBtn.setAttribute("aria-pressed", pausedByButton ? "true" : "false");
    document.body.classList.toggle("paused", isPaused());
    document.body.dataset.held = held.length;
    if (live && isPaused()) { live.textContent = pausedByButton ? "paused" : "held"; live.className = "live held"; }
  }
  function hold(fn, what) {
    if (held.length >= maxHeld) { heldOverflow = true; return; }
    held.push({ fn: fn, what: what || "" });
    showPause();
  }
  function release() {
    if (isPaused()) { showPause(); return; }
    if (heldOverflow) { location.reload(); return; }
    var todo = held;
    held = [];
    todo.forEach(function (h) { h.fn(); });
    if (live) { live.textContent = "live"; live.className = "live on"; }
    showPause();
  }
  if (live && page !== "login") {
    pauseBtn = document.createElement("button");
    pauseBtn.id = "live-pause";
    pauseBtn.type = "button";
    pauseBtn.title = "Hold live updates (the lists stay as they are) until Resume";
    live.after(pauseBtn);
    pauseBtn.addEventListener("click", function () { pausedByButton = !pausedByButton; release(); });
    showPause();
  }
  document.querySelectorAll("table.jobs").forEach(function (t) {
    t.addEventListener("mouseenter", function () { hovering = true; showPause(); });
    t.addEventListener("mouseleave", function () { hovering = false; release(); });
  });
  function whenLive(fn, what) { if (isPaused()) hold(fn, what); else fn(); }

  var sources = [];
  function connect(url, handlers) {
    var es = new EventSource(url);
    sources.push(es);
    es.onopen = function () { if (!isPaused()) { live.textContent = "live"; live.className = "live on"; } };
    es.onerror = function () { live.textContent = "reconnecting…"; live.className = "live off"; };
    Object.keys(handlers).forEach(function (ev) {
      es.addEventListener(ev, function (m) {
        var d = JSON.parse(m.data);
        whenLive(function () { handlers[ev](d, m, es); }, ev + (d && d.id ? ":" + d.id + ":" + (d.state || "") : ""));
      });
    });
    return es;
  }
  // refetch loads this page again and hands the document to fn, at most
  // once a second (a call meanwhile is one more load after it): what a
  // namespace shows of counts, queues and types is rendered by the server,
  // the stream's own figures are every namespace's.
  var refetching = {};
  function refetch(key, fn) {
    if (refetching[key]) { refetching[key] = 2; return; }
    refetching[key] = 1;
    fetch(location.pathname + location.search, { headers: { "Accept": "text/html" } })
      .then(function (r) { return r.text(); })
      .then(function (html) { fn(new DOMParser().parseFromString(html, "text/html")); })
      .catch(function () {})
      .then(function () {
        setTimeout(function () {
          var again = refetching[key] === 2;
          refetching[key] = 0;
          if (again) refetch(key, fn);
        }, 1000);
      });
  }
  // mergeRows makes tbody's rows those of fresh (keyed by data-<key>),
  // touching only rows that changed, and keeping open what was open.
  function mergeRows(tbody, fresh, key) {
    if (!fresh) return;
    var seen = {};
    Array.prototype.slice.call(fresh.rows).forEach(function (f, i) {
      var k = f.dataset[key];
      seen[k] = 1;
      var tr = null;
      Array.prototype.forEach.call(tbody.rows, function (r) { if (r.dataset[key] === k) tr = r; });
      if (!tr) {
        tr = document.importNode(f, true);
        tbody.insertBefore(tr, tbody.rows[i] || null);
        flash(tr);
        return;
      }
      if (tr.innerHTML !== f.innerHTML) {
        var open = {};
        tr.querySelectorAll("details").forEach(function (d, j) { open[j] = d.open; });
        tr.innerHTML = f.innerHTML;
        Object.keys(f.dataset).forEach(function (a) { tr.dataset[a] = f.dataset[a]; });
        tr.querySelectorAll("details").forEach(function (d, j) { if (open[j]) d.open = true; });
        flash(tr);
      }
      if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
    });
    Array.prototype.slice.call(tbody.rows).forEach(function (tr) { if (!seen[tr.dataset[key]]) tr.remove(); });
    var empty = document.getElementById("empty");
    if (empty && tbody.rows.length) empty.remove();
    relTimes();
  }
  function api(method, url, body) {
    return fetch(url, {
      method: method, headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: body ? JSON.stringify(body) : undefined
    }).then(function (r) {
      return r.json().then(function (j) { if (!r.ok) throw j; return j; });
    });
  }

  // A table of job rows kept current by "job" events of the stream.
  function liveRows(table, opts) {
    var tbody = table.tBodies[0];
    return function (s) {
      var tr = tbody.querySelector('tr[data-id="' + s.id + '"]');
      var fits = !s.deleted && (!opts.state || s.state === opts.state);
      if (tr) {
        if (!fits && opts.state) { tr.classList.add("gone"); setTimeout(function () { tr.remove(); }, 1500); }
        else if (s.deleted) tr.remove();
        else setRow(tr, s);
        return;
      }
      if (!fits || !opts.first) return;
      // A new job: rows are newest first, so it goes where its creation time says.
      tr = document.createElement("tr");
      tr.dataset.id = s.id;
      tr.dataset.created = s.created_at;
      setRow(tr, s);
      var rows = tbody.rows, placed = false;
      for (var i = 0; i < rows.length; i++) {
        if (rows[i].dataset.created < s.created_at || (rows[i].dataset.created === s.created_at && rows[i].dataset.id < s.id)) {
          tbody.insertBefore(tr, rows[i]); placed = true; break;
        }
      }
      if (!placed) {
        if (rows.length >= opts.size) return;
        tbody.appendChild(tr);
      }
      flash(tr);
      while (opts.size && tbody.rows.length > opts.size) tbody.deleteRow(tbody.rows.length - 1);
      var empty = document.getElementById("empty");
      if (empty) empty.remove();
    };
  }

  if (page === "jobs") {
    var table = document.getElementById("jobs");
    var d = table.dataset;
    // Many jobs changed at once: fetch the page again (at most once a second).
    var reloading = false, again = false;
    var reloadPage = function () {
      if (reloading) { again = true; return; }
      reloading = true;
      var q = new URLSearchParams(location.search);
      q.set("limit", d.size);
      api("GET", "/api/v1/jobs?" + q.toString()).then(function (l) {
        var tbody = table.tBodies[0], seen = {};
        l.jobs.forEach(function (j, i) {
          seen[j.id] = 1;
          var tr = tbody.querySelector('tr[data-id="' + j.id + '"]');
          if (!tr) { tr = document.createElement("tr"); tr.dataset.id = j.id; tr.dataset.created = j.created_at; }
          if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
          setRow(tr, j);
        });
        Array.prototype.slice.call(tbody.rows).forEach(function (tr) { if (!seen[tr.dataset.id]) tr.remove(); });
      }).catch(function () {}).then(function () {
        setTimeout(function () { reloading = false; if (again) { again = false; reloadPage(); } }, 1000);
      });
    };
    var onJob = liveRows(table, { state: d.state, first: d.first === "1", size: +d.size });
    var q = new URLSearchParams();
    if (d.queue) q.set("queue", d.queue);
    if (d.type) q.set("type", d.type);
    var showCounts = function (count) {
      document.querySelectorAll("#counts [data-count]").forEach(function (b) {
        var n = count(b.dataset.count);
        if (n != null && b.textContent !== String(n)) { b.textContent = n; flash(b.parentNode); }
      });
    };
    connect(streamURL(q), {
      job: onJob,
      counts: function (c) {
        if (ns) {
          // The stream counts every namespace: this one's are the page's.
          refetch("counts", function (doc) {
            showCounts(function (k) {
              var b = doc.querySelector('#counts [data-count="' + k + '"]');
              return b ? b.textContent : null;
            });
          });
          return;
        }
        showCounts(function (k) { return k === "total" ? c.total : (c.states[k] || 0); });
      },
      bulk: reloadPage,
      resync: function () { location.reload(); }
    });
    document.querySelectorAll(".filters select").forEach(function (s) {
      s.addEventListener("change", function () { s.form.submit(); });
    });
  }

  if (page === "job") {
    var job = document.getElementById("job");
    var id = job.dataset.id;
    var events = document.getElementById("events");
    var pending = null;
    function refresh() {
      if (pending) return;
      pending = setTimeout(function () {
        pending = null;
        api("GET", "/api/v1/jobs/" + id).then(renderJob).catch(function () {});
      }, 120);
    }
    function show(el, on) { if (el) el.hidden = !on; }
    function renderJob(j) {
      // The page was drawn before the job fanned out: its children,
      // batches and pieces are drawn by the server, so draw the page again
      // (it reads the same record as this answer, so once is enough).
      if (j.fanout && !document.getElementById("fanout-counts")) { location.reload(); return; }
      var st = document.getElementById("state");
      if (st.textContent !== j.state) { st.textContent = j.state; st.className = "badge big st-" + j.state; flash(st); }
      job.dataset.state = j.state;
      show(document.getElementById("cancel-btn"), !TERMINAL[j.state]);
      show(document.getElementById("prio-form"), ["pending", "scheduled", "queued"].indexOf(j.state) >= 0);
      document.getElementById("f-priority").textContent = String(j.priority || 0);
      show(document.getElementById("retry-btn"), !!TERMINAL[j.state]);
      show(document.getElementById("retry-failed-btn"), !!TERMINAL[j.state] && !!j.fanout && j.fanout.succeeded < j.fanout.total && !j.workflow);
      var pw = document.getElementById("progress-wrap");
      show(pw, showProgress(j.state, j.progress));
      if (showProgress(j.state, j.progress)) {
        var bar = document.getElementById("progress-bar");
        if (j.progress.percent != null) bar.value = j.progress.percent; else bar.removeAttribute("value");
        document.getElementById("progress-text").textContent = j.progress.current + "/" + j.progress.total +
          (j.progress.percent != null ? " (" + j.progress.percent.toFixed(1) + "%)" : "") + " " + (j.progress.message || "");
      }
      // A fan-out's counts and its progress bar come from one answer: they
      // never disagree (dashboard.go renders both from one record too).
      var fc = document.getElementById("fanout-counts");
      if (fc && j.fanout) {
        fc.textContent = j.fanout.finished + "/" + j.fanout.total + " " + j.fanout.kind + " finished · " + j.fanout.succeeded +
          " succeeded · " + j.fanout.failed + " failed · " + j.fanout.cancelled + " cancelled";
      }
      // "No live worker serves this type" holds while the job waits for one.
      var un = document.getElementById("unserved");
      if (un && ["pending", "scheduled", "queued"].indexOf(j.state) < 0) un.remove();
      document.getElementById("f-attempts").textContent = j.attempts + " (retries used " + j.retries + " of " + j.max_retries + ")";
      document.getElementById("f-worker").textContent = j.worker || "";
      document.getElementById("f-started").innerHTML = j.started_at ? '<time datetime="' + esc(j.started_at) + '"></time>' : "";
      document.getElementById("f-finished").innerHTML = j.finished_at ? '<time datetime="' + esc(j.finished_at) + '"></time>' : "";
      document.getElementById("f-duration").textContent = secs(j.duration_seconds);
      // Why a pending job waits, and where it stands: gone once it moves on.
      var hold = document.getElementById("f-hold");
      if (hold && j.hold) {
        document.getElementById("f-hold-msg").textContent = j.hold.message;
        document.getElementById("f-hold-reason").textContent = j.hold.reason;
      }
      var place = document.getElementById("f-pending");
      if (place && j.pending_position != null) place.textContent = j.pending_position + " ahead";
      [[hold, j.hold], [place, j.pending_position != null]].forEach(function (p) {
        if (p[0] && !p[1]) { p[0].previousElementSibling.remove(); p[0].remove(); }
      });
      var hasResult = j.result !== null && j.result !== undefined;
      show(document.getElementById("result-pane"), hasResult);
      if (hasResult) document.getElementById("result").textContent = JSON.stringify(j.result, null, 2);
      show(document.getElementById("error-pane"), !!j.error);
      if (j.error) document.getElementById("error").textContent = (j.error.code ? j.error.code + ": " : "") + j.error.message + (j.error.stack ? "\n\n" + j.error.stack : "");
      relTimes();
    }
    function eventHTML(e, repeat) {
      var h = '<time datetime="' + esc(e.time) + '"></time> <b class="etype">' + esc(e.type) + "</b>";
      if (repeat > 1) h += ' <span class="repeat" title="in a row">×' + repeat + "</span>";
      if (e.to) h += ' <span class="move">' + esc(e.from || "new") + " → " + badge(e.to) + "</span>";
      if (e.name) h += " <i>" + esc(e.name) + "</i>";
      if (e.attempt) h += ' <span class="dim">attempt ' + esc(e.attempt) + "</span>";
      if (e.actor) h += ' <span class="dim">by ' + esc(e.actor) + "</span>";
      if (e.progress) h += ' <span class="dim">' + esc(e.progress.current + "/" + e.progress.total) + "</span>";
      if (e.counts) h += ' <span class="dim">' + esc(e.counts.succeeded + " succeeded · " + e.counts.failed + " failed · " + e.counts.cancelled + " cancelled") + "</span>";
      if (e.message) h += ' <span class="emsg">' + esc(e.message) + "</span>";
      if (e.error && e.error.code) h += " <code>" + esc(e.error.code) + "</code>";
      return h;
    }
    var seq = +job.dataset.seq;
    var es = new EventSource("/api/v1/jobs/" + id + "/events?after=" + seq);
    sources.push(es);
    es.onopen = function () { live.textContent = "live"; live.className = "live on"; };
    es.onerror = function () {
      if (TERMINAL[job.dataset.state]) { live.textContent = "done"; live.className = "live"; es.close(); return; }
      live.textContent = "reconnecting…"; live.className = "live off";
    };
    es.onmessage = function (m) { whenLive(function () { onEvent(m); }); };
    var onEvent = function (m) {
      var e = JSON.parse(m.data);
      if (events.querySelector('li[data-seq="' + e.seq + '"]')) return;
      var last = events.lastElementChild, li;
      if ((e.type === "job.progress" || e.type === "job.fanin") && last && last.dataset.type === e.type) {
        // A run of progress reports (or fan-in counts) is one line: the last, and how many.
        li = last;
        li.dataset.repeat = (+li.dataset.repeat || 1) + 1;
      } else {
        li = document.createElement("li");
        li.dataset.repeat = 1;
        events.appendChild(li);
      }
      li.className = "ev lvl-" + (e.level || "info");
      li.dataset.seq = e.seq;
      li.dataset.type = e.type;
      li.innerHTML = eventHTML(e, +li.dataset.repeat);
      flash(li);
      relTimes();
      refresh();
    };
    es.addEventListener("end", function () { es.close(); live.textContent = "done"; live.className = "live"; refresh(); });
    var kids = document.getElementById("children");
    if (kids) {
      connect("/api/v1/stream?parent=" + encodeURIComponent(id), { job: liveRows(kids, { first: true, size: 200 }) });
    }
    var msg = document.getElementById("action-msg");
    function say(text, bad) { msg.textContent = text; msg.hidden = false; msg.className = "msg" + (bad ? " error" : ""); }
    document.getElementById("cancel-btn").addEventListener("click", function () {
      if (!confirm("Cancel job " + id + "?")) return;
      api("POST", "/api/v1/jobs/" + id + "/cancel", { reason: "cancelled from the dashboard" })
        .then(function (j) { renderJob(j); say("Cancelled."); })
        .catch(function (p) { say(p.detail || "cancel failed", true); });
    });
    document.getElementById("prio-btn").addEventListener("click", function () {
      var v = document.getElementById("prio-input").value.trim();
      if (!/^-?\d+$/.test(v)) { say("the priority is a whole number, -1000 to 1000", true); return; }
      api("POST", "/api/v1/jobs/" + id + "/priority", { priority: parseInt(v, 10) })
        .then(function (j) { renderJob(j); say("Priority " + (j.priority || 0) + "."); })
        .catch(function (p) { say(p.detail || "priority change failed", true); });
    });
    document.getElementById("retry-btn").addEventListener("click", function () {
      // A workflow resumes from its failed steps (a new run, retry_of).
      var wf = !!document.getElementById("workflow");
      api("POST", wf ? "/api/v1/workflows/" + id + "/retry" : "/api/v1/jobs/" + id + "/retry")
        .then(function (j) { location.href = "/jobs/" + j.id; })
        .catch(function (p) { say(p.detail || "retry failed", true); });
    });
    document.getElementById("retry-failed-btn").addEventListener("click", function () {
      api("POST", "/api/v1/jobs/" + id + "/retry", { failed_pieces: true })
        .then(function (j) { location.href = "/jobs/" + j.id; })
        .catch(function (p) { say(p.detail || "retry failed", true); });
    });
  }

  if (page === "queues") {
    var qt = document.getElementById("queues").tBodies[0];
    // limit and slotUsers are dashboard.go's template functions.
    var limit = function (n) { return n ? String(n) : "—"; };
    var rate = function (q) {
      if (!q.rate_limit) return "—";
      return q.rate_limit + " / " + goDuration(q.rate_period) + (q.rate_key ? " per " + q.rate_key : "");
    };
    var prio = function (q) {
      if (q.priorities) return "yes, max_queued " + q.max_queued;
      return q.max_queued ? "max_queued " + q.max_queued : "—";
    };
    var slotUsers = function (q) {
      if (!q.slots || !q.slots.users) return "";
      return Object.keys(q.slots.users).sort().map(function (u) {
        var c = q.slots.users[u];
        return u + ": " + c.running + " running, " + c.pending + " pending";
      }).join("; ");
    };
    function qrow(q) {
      var mini = "";
      STATES.forEach(function (s) {
        var n = q.jobs && q.jobs[s];
        if (n) mini += '<a class="badge st-' + s + '" href="/?queue=' + encodeURIComponent(q.name) + "&amp;state=" + s + '">' + s + " " + n + "</a> ";
      });
      return '<td class="name"><a href="/?queue=' + encodeURIComponent(q.name) + '">' + esc(q.name) + "</a></td>" +
        '<td class="status">' + (q.paused ? '<span class="badge st-paused">paused</span>' : '<span class="badge st-active">active</span>') + "</td>" +
        '<td class="num depth">' + q.depth + '</td><td class="num running">' + q.running + '</td><td class="num held">' + q.held +
        '</td><td class="num delayed">' + q.delayed + "</td>" +
        '<td class="num pending"' + (slotUsers(q) ? ' title="' + esc(slotUsers(q)) + '"' : "") + ">" + (q.slots ? q.slots.pending : (q.jobs && q.jobs.pending) || 0) + "</td>" +
        '<td class="num maxrun">' + limit(q.max_running) + '</td><td class="num maxuser">' + limit(q.max_running_per_user) + "</td>" +
        '<td class="num maxkey">' + limit(q.max_running_per_key) + '</td><td class="num rate">' + esc(rate(q)) + '</td><td class="prio">' + esc(prio(q)) + "</td>" +
        '<td class="mini">' + mini + "</td>" +
        '<td><button class="qtoggle" data-queue="' + esc(q.name) + '" data-paused="' + q.paused + '">' + (q.paused ? "Resume" : "Pause") + "</button></td>";
    }
    // With a namespace, the rows are the page's: the stream's queues count
    // every namespace's jobs.
    var refreshQueues = function () {
      refetch("queues", function (doc) { mergeRows(qt, doc.querySelector("#queues tbody"), "queue"); });
    };
    connect(streamURL(new URLSearchParams("with=queues")), {
      queues: function (qs) {
        if (ns) { refreshQueues(); return; }
        qs.forEach(function (q) {
          var tr = qt.querySelector('tr[data-queue="' + q.name + '"]');
          if (!tr) { tr = document.createElement("tr"); tr.dataset.queue = q.name; qt.appendChild(tr); }
          var h = qrow(q);
          if (tr.innerHTML !== h) tr.innerHTML = h;
        });
      }
    });
    qt.addEventListener("click", function (ev) {
      var b = ev.target.closest("button.qtoggle");
      if (!b) return;
      var pause = b.dataset.paused !== "true";
      b.disabled = true;
      api("POST", "/api/v1/queues/" + encodeURIComponent(b.dataset.queue) + (pause ? "/pause" : "/resume"))
        .then(function (q) { if (ns) refreshQueues(); else b.closest("tr").innerHTML = qrow(q); })
        .catch(function (p) { alert(p.detail || "failed"); b.disabled = false; });
    });
  }

  if (page === "types") {
    var tt = document.getElementById("types").tBodies[0];
    var deleted = document.getElementById("show-deleted");
    deleted.addEventListener("change", function () { deleted.form.submit(); });
    // Live workers and job counts change: the rows are the page's, as the
    // server renders them for the namespace.
    var refreshTypes = function () {
      refetch("types", function (doc) { mergeRows(tt, doc.querySelector("#types tbody"), "type"); });
    };
    connect(streamURL(new URLSearchParams("with=workers")), { workers: refreshTypes, counts: refreshTypes });
  }

  // servesNamespace is dashboard.go's visibleFrom: a worker serves a
  // namespace if one of its types is free-form, @global, @internal or of it.
  function servesNamespace(types) {
    if (!ns) return true;
    return types.some(function (t) {
      var i = t.indexOf(":");
      return i < 0 || t.charAt(0) === "@" || t.slice(0, i) === ns;
    });
  }

  // concurrencyText is workerview.go's: a Go worker's concurrency is per
  // queue (one runtime each), not their sum.
  function concurrencyText(w) {
    var qc = w.queue_concurrency || {}, names = Object.keys(qc).sort();
    if (names.length === 0) return String(w.concurrency);
    if (names.length === 1) return String(qc[names[0]]);
    var same = names.every(function (q) { return qc[q] === qc[names[0]]; });
    if (same) return qc[names[0]] + " on each of " + names.length + " queues";
    return names.map(function (q) { return q + ": " + qc[q]; }).join(", ");
  }

  if (page === "workers") {
    var wt = document.getElementById("workers").tBodies[0];
    connect("/api/v1/stream?with=workers", {
      workers: function (ws) {
        var seen = {};
        ws = ws.filter(function (w) { return servesNamespace(w.types); });
        ws.forEach(function (w) {
          seen[w.id] = 1;
          var tr = wt.querySelector('tr[data-worker="' + w.id + '"]');
          if (!tr) { tr = document.createElement("tr"); tr.dataset.worker = w.id; wt.appendChild(tr); }
          tr.innerHTML = "<td>" + esc(w.name) + "</td><td><code>" + esc(w.id) + "</code></td><td>" + esc(w.kind) + "</td><td>" +
            (w.live ? '<span class="badge st-succeeded">live</span>' : '<span class="badge st-failed">silent</span>') + "</td><td>" +
            esc(w.types.join(", ")) + "</td><td>" + esc(w.queues.join(", ")) + '</td><td class="num concurrency">' + esc(concurrencyText(w)) + "</td><td>" +
            w.claims.map(function (c) { return '<a href="/jobs/' + esc(c) + '"><code>' + esc(c) + "</code></a>"; }).join(" ") +
            '</td><td><time datetime="' + esc(w.last_heartbeat) + '"></time></td>';
        });
        Array.prototype.slice.call(wt.rows).forEach(function (tr) { if (!seen[tr.dataset.worker]) tr.remove(); });
        var empty = document.getElementById("empty");
        if (empty && ws.length) empty.remove();
        relTimes();
      }
    });
  }
  // The schedules page: the rows from GET /api/v1/schedules's stream (a
  // "schedules" event with the list at each change); schedules.html's
  // schedulerow is the same row.
  function goDuration(secs) {
    var h = Math.floor(secs / 3600), m = Math.floor(secs % 3600 / 60), s = +(secs % 60).toFixed(9);
    if (h) return h + "h" + m + "m" + s + "s";
    if (m) return m + "m" + s + "s";
    return s + "s";
  }
  function scheduleRow(v) {
    var timing = v.cron ? v.cron + " (" + (v.timezone || "UTC") + ")" : (v.every != null ? "every " + goDuration(v.every) : "");
    var runs = (v.last_runs || []).slice(0, 5).map(function (r) {
      var cls = "badge outcome-" + esc(r.outcome);
      if (r.job_id) return '<a class="' + cls + '" href="/jobs/' + esc(r.job_id) + '" title="' + esc(r.at) + '">' + esc(r.outcome) + "</a>";
      return '<span class="' + cls + '" title="' + esc(r.at + (r.error ? ": " + r.error : "")) + '">' + esc(r.outcome) + "</span>";
    }).join(" ");
    return '<td class="ns">' + esc(v.namespace) + '</td><td class="name">' + esc(v.name) + '</td><td class="timing">' + esc(timing) +
      '</td><td class="type">' + esc((v.job || {}).type) + '</td><td class="status">' +
      (v.paused ? '<span class="badge st-paused">paused</span>' : '<span class="badge st-active">active</span>') + '</td><td class="next">' +
      (v.next_run_at ? '<time datetime="' + esc(v.next_run_at) + '"></time>' : "—") + '</td><td class="runs">' + runs +
      '</td><td class="num ticks">' + v.counts.fired + " / " + v.counts.skipped_overlap + " / " + v.counts.missed +
      '</td><td><button class="stoggle" data-namespace="' + esc(v.namespace) + '" data-name="' + esc(v.name) + '" data-paused="' + v.paused + '">' +
      (v.paused ? "Resume" : "Pause") + "</button></td>";
  }
  if (page === "schedules") {
    var st = document.getElementById("schedules").tBodies[0];
    connect("/api/v1/schedules" + (ns ? "?namespace=" + encodeURIComponent(ns) : ""), {
      schedules: function (d) {
        var seen = {};
        d.schedules.forEach(function (v) {
          var key = v.namespace + "/" + v.name;
          seen[key] = 1;
          var tr = st.querySelector('tr[data-schedule="' + key + '"]');
          if (!tr) { tr = document.createElement("tr"); tr.dataset.schedule = key; st.appendChild(tr); }
          tr.dataset.paused = String(v.paused);
          tr.innerHTML = scheduleRow(v);
        });
        Array.prototype.slice.call(st.rows).forEach(function (tr) { if (!seen[tr.dataset.schedule]) tr.remove(); });
        var empty = document.getElementById("empty");
        if (empty && d.schedules.length) empty.remove();
        relTimes();
      }
    });
    st.addEventListener("click", function (ev) {
      var b = ev.target.closest("button.stoggle");
      if (!b) return;
      b.disabled = true;
      api("POST", "/api/v1/schedules/" + encodeURIComponent(b.dataset.name) + (b.dataset.paused === "true" ? "/resume" : "/pause") +
        "?namespace=" + encodeURIComponent(b.dataset.namespace))
        .catch(function (p) { alert(p.detail || "failed"); b.disabled = false; });
    });
  }
})();
