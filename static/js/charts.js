/* History charts: every <canvas data-url> is drawn from its JSON (apps/monitoring/charts.py).
   Linear x axis in epoch ms (no date adapter), ticks formatted here in UTC. Null values are gaps:
   spanGaps is off, so a line never crosses a poll that did not happen or did not reach the node.
   Each chart has its own range picker; the 1 h range refreshes every 10 s. */
(function () {
  "use strict";
  // 16 distinct colours (no two series of one legend share one), none the limit's red or the warning's amber.
  const PALETTE = ["#1f5fbf", "#1d7f45", "#7a3fb0", "#0f7c8c", "#c2570c", "#5a6475", "#8c1f62", "#2f4b7c",
                   "#d45087", "#00876c", "#9c6b30", "#665191", "#4e79a7", "#59a14f", "#e15759", "#17becf"];
  // At most this many series drawn at first (limits and warnings always); the rest behind the legend and a toggle.
  const SHOWN = 5;
  const STYLE_RANK = { main: 0, stepped: 1, line: 2, dashed: 3, dotted: 4 };
  const STYLES = {
    main: { borderWidth: 2 },
    line: { borderWidth: 1.5 },
    dashed: { borderWidth: 1.5, borderDash: [5, 4] },
    dotted: { borderWidth: 1.5, borderDash: [2, 3] },
    limit: { borderWidth: 2, borderDash: [8, 4], color: "#b42318" },
    warn: { borderWidth: 1, borderDash: [3, 3], color: "#a86a00" },
    stepped: { borderWidth: 2, stepped: "before" },
  };
  const REFRESH_MS = 10000;

  const tickStep = TimeAxis.tickStep, roundTicks = TimeAxis.roundTicks, tickLabel = TimeAxis.tickLabel,
    fullTime = TimeAxis.fullTime;

  // No dots on lines; a value with gaps on both sides has no line to show it, so it gets a dot.
  function isolatedPoint(ctx) {
    const d = ctx.dataset.data, i = ctx.dataIndex;
    if (!d[i] || d[i].y === null) return 0;
    const before = i > 0 ? d[i - 1].y : null, after = i < d.length - 1 ? d[i + 1].y : null;
    return before === null && after === null ? 2.5 : 0;
  }

  function peak(values) {
    return values.reduce(function (m, v) { return v !== null && v > m ? v : m; }, -Infinity);
  }

  // The series drawn at first: limits and warnings, then by style (main first) and by peak, SHOWN in all.
  function shownByDefault(series) {
    const fixed = series.filter(function (s) { return s.style === "limit" || s.style === "warn"; });
    const ranked = series.filter(function (s) { return fixed.indexOf(s) < 0; }).sort(function (a, b) {
      const r = (STYLE_RANK[a.style] ?? 2) - (STYLE_RANK[b.style] ?? 2);
      return r || peak(b.values) - peak(a.values);
    });
    return new Set(fixed.concat(ranked.slice(0, Math.max(0, SHOWN - fixed.length))).map(function (s) { return s.label; }));
  }

  function datasets(data, visible) {
    let colourIndex = 0;
    return data.series.map(function (s) {
      const style = STYLES[s.style] || STYLES.line;
      const colour = style.color || PALETTE[colourIndex++ % PALETTE.length];
      return {
        label: s.label, hidden: !visible(s.label),
        data: data.t.map(function (x, i) { return { x: x, y: s.values[i] }; }),
        borderColor: colour, backgroundColor: colour,
        borderWidth: style.borderWidth, borderDash: style.borderDash || [], stepped: style.stepped || false,
        pointRadius: isolatedPoint, pointHitRadius: 4, spanGaps: false, tension: 0,
      };
    });
  }

  function yScale(data) {
    const y = { beginAtZero: true, title: { display: !!data.unit, text: data.unit } };
    if (data.y) {
      if (data.y.min !== undefined) y.min = data.y.min;
      if (data.y.max !== undefined) y.max = data.y.max;
      if (data.y.ticks) {
        // Named levels (wsrep states): one tick per level, labelled with its name.
        const levels = Object.keys(data.y.ticks).map(Number);
        y.afterBuildTicks = function (axis) { axis.ticks = levels.map(function (v) { return { value: v }; }); };
        y.ticks = { autoSkip: false, callback: function (v) { return data.y.ticks[String(v)] || ""; } };
      }
    }
    return y;
  }

  function note(data) {
    const points = data.t.length;
    const res = { 0: "raw polls", 60: "1-minute rollups", 3600: "1-hour rollups" }[data.resolution];
    const bucket = data.bucket ? ", " + data.bucket + " s per point" : "";
    return points ? res + bucket + "; breaks in a line are polls that are missing or failed"
                  : "No data in this range.";
  }

  // Which series show: the reader's choice (legend clicks) kept across refreshes, else the default few.
  function visibility(canvas, existing, data) {
    if (canvas.dataset.allSeries === "1") return function () { return true; };
    const chosen = {};
    if (existing) existing.data.datasets.forEach(function (d, i) { chosen[d.label] = existing.isDatasetVisible(i); });
    const byDefault = shownByDefault(data.series);
    return function (label) { return label in chosen ? chosen[label] : byDefault.has(label); };
  }

  // "Show all N series" / "Show the main ones" under a chart that has more than SHOWN.
  function seriesToggle(canvas, data) {
    const figure = canvas.closest("[data-chart]");
    if (!figure) return;
    let button = figure.querySelector("button[data-all-series]");
    if (data.series.length <= SHOWN) { if (button) button.remove(); return; }
    if (!button) {
      button = document.createElement("button");
      button.type = "button";
      button.className = "range";
      button.dataset.allSeries = "";
      button.addEventListener("click", function () {
        canvas.dataset.allSeries = canvas.dataset.allSeries === "1" ? "" : "1";
        const chart = Chart.getChart(canvas);
        if (chart) chart.destroy();  // the defaults again, or every series
        load(canvas);
      });
      figure.appendChild(button);
    }
    button.textContent = canvas.dataset.allSeries === "1" ? "Show the main " + SHOWN + " series"
                                                          : "Show all " + data.series.length + " series";
  }

  function draw(canvas, data) {
    const existing = Chart.getChart(canvas);
    const span = data.end - data.start;
    let step = tickStep(span);  // set again from the axis' width when its ticks are built
    const config = {
      type: "line",
      data: { datasets: datasets(data, visibility(canvas, existing, data)) },
      options: {
        animation: false, parsing: false, normalized: true, responsive: true, maintainAspectRatio: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          x: { type: "linear", min: data.start, max: data.end,
               afterBuildTicks: function (axis) {
                 step = tickStep(span, axis.width);
                 axis.ticks = roundTicks(data.start, data.end, step);
               },
               ticks: { callback: function (value) { return tickLabel(value, span, step); }, autoSkip: false, maxRotation: 0 },
               title: { display: true, text: "UTC" } },
          y: yScale(data),
        },
        plugins: {
          legend: { labels: { boxWidth: 12, font: { size: 11 } } },
          tooltip: { callbacks: { title: function (items) { return items.length ? fullTime(items[0].parsed.x) : ""; } } },
        },
      },
    };
    if (existing) {
      existing.data = config.data;
      existing.options = config.options;
      existing.update("none");
    } else {
      new Chart(canvas, config);
    }
    const figure = canvas.closest("[data-chart]");
    const p = figure && figure.querySelector(".chart-note");
    if (p) p.textContent = note(data);
    canvas.dataset.points = String(data.t.length);
    seriesToggle(canvas, data);
  }

  function load(canvas) {
    const url = new URL(canvas.dataset.url, window.location.href);
    url.searchParams.set("range", canvas.dataset.range || "1h");
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (data) { draw(canvas, data); canvas.dataset.loaded = "1"; })
      .catch(function (err) {
        const figure = canvas.closest("[data-chart]");
        const p = figure && figure.querySelector(".chart-note");
        if (p) p.textContent = "Could not load this chart: " + err.message;
      });
  }

  function setup(figure) {
    const canvas = figure.querySelector("canvas[data-url]");
    if (!canvas || canvas.dataset.ready) return;
    canvas.dataset.ready = "1";
    canvas.dataset.range = "1h";
    figure.querySelectorAll("button[data-range]").forEach(function (button) {
      button.addEventListener("click", function () {
        figure.querySelectorAll("button[data-range]").forEach(function (b) { b.classList.remove("active"); });
        button.classList.add("active");
        canvas.dataset.range = button.dataset.range;
        load(canvas);
      });
    });
    load(canvas);
  }

  function setupAll(root) { (root || document).querySelectorAll("[data-chart]").forEach(setup); }

  document.addEventListener("DOMContentLoaded", function () {
    setupAll(document);
    window.setInterval(function () {
      if (document.hidden) return;
      document.querySelectorAll("canvas[data-url][data-ready]").forEach(function (canvas) {
        if ((canvas.dataset.range || "1h") === "1h") load(canvas);
      });
    }, REFRESH_MS);
  });
  document.addEventListener("htmx:afterSettle", function (e) { setupAll(e.target); });
})();
