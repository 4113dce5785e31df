// jetflow dashboard: the charts of the overview and of a queue's page,
// drawn with uPlot (vendor/, MIT) from GET /api/v1/stats/series. They are
// read again every few seconds unless live updates are paused.
(function () {
  "use strict";
  var box = document.getElementById("charts");
  if (!box || typeof uPlot === "undefined") return;
  var d = box.dataset;
  var css = getComputedStyle(document.documentElement);
  function color(v, fallback) { return (css.getPropertyValue(v) || "").trim() || fallback; }
  var C = {
    started: color("--running", "#d97706"), succeeded: color("--succeeded", "#16a34a"), failed: color("--failed", "#dc2626"),
    depth: color("--queued", "#3b82f6"), wait: color("--scheduled", "#8e5bd9"), avg: color("--claimed", "#0d9488"),
    max: color("--waiting", "#6366f1"), ink: color("--dim", "#6b7385"), grid: color("--line", "#e3e6ec")
  };
  function secs(f) {
    if (f == null) return "–";
    if (f < 1) return Math.round(f * 1000) + "ms";
    if (f < 60) return f.toFixed(1) + "s";
    if (f < 3600) return Math.floor(f / 60) + "m" + String(Math.floor(f % 60)).padStart(2, "0") + "s";
    return Math.floor(f / 3600) + "h" + String(Math.floor(f % 3600 / 60)).padStart(2, "0") + "m";
  }
  function axes(fmt) {
    var a = { stroke: C.ink, grid: { stroke: C.grid, width: 1 }, ticks: { stroke: C.grid } };
    var y = { stroke: C.ink, grid: { stroke: C.grid, width: 1 }, ticks: { stroke: C.grid }, size: 56 };
    if (fmt) y.values = function (u, vals) { return vals.map(fmt); };
    return [a, y];
  }
  function line(label, stroke, fmt, fill, dots) {
    // Sparse series (a latency only where jobs started) show their points:
    // a lone value between gaps draws no line.
    var s = { label: label, stroke: stroke, width: 2, points: { show: !!dots, size: 5, fill: stroke } };
    if (fill) s.fill = stroke + "22";
    if (fmt) s.value = function (u, v) { return fmt(v); };
    return s;
  }
  function bars(label, stroke) {
    return { label: label, stroke: stroke, fill: stroke + "55", width: 1, paths: uPlot.paths.bars({ size: [0.6, 64] }), points: { show: false } };
  }
  var charts = {
    throughput: { series: [bars("started", C.started), line("succeeded", C.succeeded), line("failed", C.failed)],
      data: function (s) { return [s.t, s.started, s.succeeded, s.failed]; } },
    depth: { series: [line("queued", C.depth, null, true)], data: function (s) { return [s.t, s.depth]; } },
    wait: { series: [line("oldest wait", C.wait, secs, true, true)], fmt: secs, data: function (s) { return [s.t, s.oldest_wait_seconds]; } },
    latency: { series: [line("average", C.avg, secs, false, true), line("longest", C.max, secs, false, true)], fmt: secs,
      data: function (s) { return [s.t, s.latency_avg_seconds, s.latency_max_seconds]; } }
  };
  // From 0, and at least to 1: an empty or flat series gets a few readable
  // ticks, not a crowd of labels over a zero-height range.
  function yRange(u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; }
  var plots = {};
  function draw(name, s) {
    var c = charts[name], fig = document.getElementById("chart-" + name), el = fig.querySelector(".plot");
    var data = c.data(s);
    fig.dataset.points = s.t.length;
    if (plots[name]) { plots[name].setData(data); return; }
    var opts = {
      width: Math.max(320, el.clientWidth), height: 200, series: [{ value: function (u, v) { return v == null ? "" : new Date(v * 1000).toLocaleString(); } }].concat(c.series),
      axes: axes(c.fmt), scales: { x: { time: true }, y: { range: yRange } }, cursor: { drag: { x: false, y: false } }, legend: { live: true },
      // The y range drawn, on the figure (data-y="min..max").
      hooks: { setScale: [function (u, key) { if (key === "y") fig.dataset.y = u.scales.y.min + ".." + u.scales.y.max; }] }
    };
    plots[name] = new uPlot(opts, data, el);
  }
  function sum(a) { return a.reduce(function (x, y) { return x + (y || 0); }, 0); }
  var asof = document.getElementById("charts-asof");
  function load() {
    var q = new URLSearchParams({ range: d.range });
    if (d.namespace) q.set("namespace", d.namespace);
    if (d.queue) q.set("queue", d.queue);
    return fetch("/api/v1/stats/series?" + q.toString(), { headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (s) {
        if (!s.t) return;
        Object.keys(charts).forEach(function (n) { draw(n, s); });
        var t = document.querySelector("#chart-throughput .total");
        var n = sum(s.started), ok = sum(s.succeeded), bad = sum(s.failed);
        t.dataset.started = n; t.dataset.succeeded = ok; t.dataset.failed = bad;
        t.textContent = n + " started · " + ok + " succeeded · " + bad + " failed";
        var step = { 60: "minute", 600: "10 minutes", 3600: "hour" }[s.step_seconds] || secs(s.step_seconds);
        document.querySelectorAll("#charts .step").forEach(function (e) { e.textContent = step; });
        var live = document.getElementById("live");
        if (live && !(window.jetflowPaused && window.jetflowPaused())) { live.textContent = "live"; live.className = "live on"; }
        if (s.as_of) asof.textContent = "Folded from the event log by the engine, up to " + s.as_of.replace("T", " ").replace(/\.\d+Z$|Z$/, "") + " UTC.";
        box.dataset.loaded = (+box.dataset.loaded || 0) + 1;
      }).catch(function () {});
  }
  load();
  var every = d.range === "hour" ? 5000 : 60000;
  setInterval(function () {
    if (window.jetflowPaused && window.jetflowPaused()) return;
    load();
  }, every);
  window.addEventListener("resize", function () {
    Object.keys(plots).forEach(function (n) {
      var el = document.querySelector("#chart-" + n + " .plot");
      plots[n].setSize({ width: Math.max(320, el.clientWidth), height: 200 });
    });
  });
})();
