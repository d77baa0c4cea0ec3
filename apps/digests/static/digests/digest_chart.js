/* The digest detail chart: fetches the JSON named by <canvas data-chart-url> (apps/digests/views.py,
   digest_chart) and draws executions/s and time per execution. Linear x axis in epoch ms (no date
   adapter), its ticks on round UTC times as every chart's (static/js/time_axis.js); null values are gaps (spanGaps
   off): no poll produced figures there. */
(function () {
  "use strict";
  function series(points, key) { return points.map(function (p) { return { x: p.x, y: p[key] }; }); }

  function draw(canvas) {
    const note = canvas.closest(".card").querySelector(".chart-note");
    fetch(canvas.dataset.chartUrl, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (data) {
        const span = data.end - data.start;
        let step = TimeAxis.tickStep(span);  // set again from the axis' width when its ticks are built
        const gaps = data.points.filter(function (p) { return p.rate === null; }).length;
        if (note) {
          note.textContent = data.points.length + " buckets of " + (data.bucket_s >= 3600 ? data.bucket_s / 3600 + " h" :
            data.bucket_s / 60 + " min") + (gaps ? ", " + gaps + " without data (gaps)" : "") +
            (data.partial ? ", " + data.partial + " with figures from only some of its " + data.nodes + " nodes" : "");
        }
        const chart = new Chart(canvas, {
          type: "line",
          data: { datasets: [
            { label: "executions/s", data: series(data.points, "rate"), yAxisID: "rate", borderColor: "#1f5fbf",
              backgroundColor: "#1f5fbf", borderWidth: 2, pointRadius: 0, pointHitRadius: 4, spanGaps: false },
            { label: "average ms", data: series(data.points, "avg_ms"), yAxisID: "ms", borderColor: "#1d7f45",
              backgroundColor: "#1d7f45", borderWidth: 1.5, pointRadius: 0, pointHitRadius: 4, spanGaps: false },
            { label: "max ms", data: series(data.points, "max_ms"), yAxisID: "ms", borderColor: "#a86a00",
              backgroundColor: "#a86a00", borderWidth: 1, borderDash: [4, 3], pointRadius: 0, pointHitRadius: 4,
              spanGaps: false },
          ] },
          options: {
            animation: false, parsing: true, normalized: true, maintainAspectRatio: false,
            interaction: { mode: "index", intersect: false },
            scales: {
              x: { type: "linear", min: data.start, max: data.end,
                   afterBuildTicks: function (axis) {
                     step = TimeAxis.tickStep(span, axis.width);
                     axis.ticks = TimeAxis.roundTicks(data.start, data.end, step);
                   },
                   ticks: { callback: function (value) { return TimeAxis.tickLabel(value, span, step); },
                            autoSkip: false, maxRotation: 0 },
                   title: { display: true, text: "UTC" } },
              rate: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: "executions/s" } },
              ms: { type: "linear", position: "right", beginAtZero: true, grid: { drawOnChartArea: false },
                    title: { display: true, text: "ms per execution" } },
            },
            plugins: { tooltip: { callbacks: { title: function (items) { return items.length ? TimeAxis.fullTime(items[0].parsed.x) : ""; } } } },
          },
        });
        canvas.dataset.drawn = "1";
        canvas.chart = chart;
      })
      .catch(function (err) { if (note) note.textContent = "Chart data unavailable: " + err.message; });
  }

  function init() { document.querySelectorAll("canvas[data-chart-url]").forEach(draw); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
