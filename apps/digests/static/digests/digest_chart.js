/* The digest detail chart: fetches the JSON named by <canvas data-chart-url> (apps/digests/views.py,
   digest_chart) and draws executions/s and time per execution. Linear x axis in epoch ms (no date
   adapter), ticks in UTC; null values are gaps (spanGaps off): no poll produced figures there. */
(function () {
  "use strict";
  function pad(n) { return String(n).padStart(2, "0"); }
  function tick(spanMs) {
    return function (value) {
      const d = new Date(value);
      const hm = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
      if (spanMs <= 2 * 86400 * 1000) return hm;
      return pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + (spanMs <= 8 * 86400 * 1000 ? " " + hm : "");
    };
  }
  function full(ms) {
    const d = new Date(ms);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + " UTC";
  }
  function series(points, key) { return points.map(function (p) { return { x: p.x, y: p[key] }; }); }

  function draw(canvas) {
    const note = canvas.closest(".card").querySelector(".chart-note");
    fetch(canvas.dataset.chartUrl, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (data) {
        const span = data.end - data.start;
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
              x: { type: "linear", min: data.start, max: data.end, ticks: { callback: tick(span), maxTicksLimit: 10 } },
              rate: { type: "linear", position: "left", beginAtZero: true, title: { display: true, text: "executions/s" } },
              ms: { type: "linear", position: "right", beginAtZero: true, grid: { drawOnChartArea: false },
                    title: { display: true, text: "ms per execution" } },
            },
            plugins: { tooltip: { callbacks: { title: function (items) { return items.length ? full(items[0].parsed.x) : ""; } } } },
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
