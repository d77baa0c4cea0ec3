/* The time axis every chart of the console uses (static/js/charts.js: the history charts; digests/digest_chart.js:
   a digest's chart): ticks on round UTC times, spaced by the axis' width so that labels never run into each other,
   times of day up to a day and dates over it. Loaded before the charts that use it (window.TimeAxis). */
(function () {
  "use strict";
  // Tick steps on round UTC times: 1 min ... 7 days.
  const MINUTE = 60000, DAY = 86400000;
  const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080].map(function (m) { return m * MINUTE; });

  function pad(n) { return String(n).padStart(2, "0"); }

  // Room a tick label needs on the axis: its characters at the axis font and a gap. Ticks closer than that take the
  // next round step (24 h on a 1366 px screen: 6 h between labels, not 3 h, whose labels ran into each other).
  const PX_PER_CHAR = 7, LABEL_GAP = 16;

  function labelChars(spanMs, step) { return spanMs < DAY || step >= DAY ? 5 : 11; }  // "17:30", "12-05", both

  function tickStep(spanMs, axisPx) {
    return STEPS.find(function (step) {
      const n = spanMs / step;
      return n <= 8 && (!axisPx || axisPx / n >= labelChars(spanMs, step) * PX_PER_CHAR + LABEL_GAP);
    }) || STEPS[STEPS.length - 1];
  }

  // Ticks at multiples of a round step (epoch multiples of a day are UTC midnights).
  function roundTicks(start, end, step) {
    const ticks = [];
    for (let v = Math.ceil(start / step) * step; v <= end; v += step) ticks.push({ value: v });
    return ticks;
  }

  // Times of day on ranges up to a day; over that (24 h included) the date as well, alone once a tick is a day.
  function tickLabel(value, spanMs, step) {
    const d = new Date(value);
    const hm = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    const date = pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate());
    if (spanMs < DAY) return hm;
    return step >= DAY ? date : date + " " + hm;
  }

  function fullTime(ms) {
    const d = new Date(ms);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + " UTC";
  }

  window.TimeAxis = { tickStep: tickStep, roundTicks: roundTicks, tickLabel: tickLabel, fullTime: fullTime };
})();
