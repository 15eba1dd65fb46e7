/* The console's charts: each `[data-chart]` element is drawn with uPlot (vendored) from
 * the JSON data block its attribute names (`<script type="application/json">`: data,
 * never executed, so the page's CSP allows it). Every minute, while the page is shown,
 * the charts of a `[data-chart-src]` section are redrawn from that metrics.json URL.
 * The figures table under each chart is the page's own (as of loading): this file adds
 * nothing a reader without it would miss but the drawing. */
(function () {
  "use strict";

  var COLORS = ["#0b5cad", "#b42318", "#1a7f37", "#8250df", "#bf8700", "#57606a"];
  var HEIGHT = 220;
  var REFRESH_MS = 60000;
  var plots = {}; // chart id -> uPlot

  function formatter(unit) {
    return function (self, ticks) {
      return ticks.map(function (v) {
        if (unit === "bytes/s") {
          var units = ["B/s", "KB/s", "MB/s", "GB/s"];
          var i = 0;
          while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
          return (Math.round(v * 10) / 10) + " " + units[i];
        }
        var text = Math.abs(v) >= 1e6 ? (v / 1e6) + "M" : Math.abs(v) >= 1e4 ? (v / 1e3) + "k" : String(v);
        return unit === "s" ? text + " s" : text;
      });
    };
  }

  function options(chart, width) {
    var series = [{}];
    chart.series.forEach(function (line, i) {
      series.push({
        label: line.label,
        stroke: COLORS[i % COLORS.length],
        width: 2,
        points: {show: false},
      });
    });
    return {
      width: width,
      height: HEIGHT,
      // Times in UTC, as everywhere in the console (not the browser's zone).
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      series: series,
      scales: {y: {range: function (self, min, max) { return [0, max > 0 ? max * 1.1 : 1]; }}},
      axes: [{}, {values: formatter(chart.unit), size: 70}],
      legend: {show: chart.series.length > 1},
    };
  }

  function data(chart) {
    return [chart.x].concat(chart.series.map(function (line) { return line.values; }));
  }

  function draw(el, chart) {
    var existing = plots[chart.id];
    if (existing) {
      existing.setData(data(chart));
      return;
    }
    var width = Math.max(300, el.clientWidth);
    var plot = new uPlot(options(chart, width), data(chart), el);
    plots[chart.id] = plot;
    el.uplot = plot; // read by the browser tests
    if (window.ResizeObserver) {
      new ResizeObserver(function () {
        var w = Math.max(300, el.clientWidth);
        if (w !== plot.width) { plot.setSize({width: w, height: HEIGHT}); }
      }).observe(el);
    }
  }

  function drawAll() {
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      var block = document.getElementById(el.getAttribute("data-chart"));
      if (block) { draw(el, JSON.parse(block.textContent)); }
    });
  }

  function refresh() {
    if (document.hidden) { return; }
    document.querySelectorAll("[data-chart-src]").forEach(function (section) {
      fetch(section.getAttribute("data-chart-src"), {credentials: "same-origin"})
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (body) {
          if (!body) { return; }
          body.charts.forEach(function (chart) {
            var el = section.querySelector('[data-chart="' + chart.id + '-data"]');
            if (el && plots[chart.id]) { draw(el, chart); }
          });
        })
        .catch(function () { /* the page keeps what it drew */ });
    });
  }

  function start() {
    if (typeof uPlot === "undefined") { return; }
    drawAll();
    window.setInterval(refresh, REFRESH_MS);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
