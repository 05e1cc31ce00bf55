// Hand-drawn SVG time-series charts shared by the router's status page and
// the supervisor's UI (inlined into each page; no build step, no fetch).
// Gaps (null) break a line; they are never drawn as zero.
const Charts = (() => {
  "use strict";
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");

  // Store merges the incremental documents of a series route: times t
  // (unix ms) and, per key, the values at those times. It keeps spanMs.
  class Store {
    constructor(spanMs) { this.span = spanMs; this.t = []; this.series = new Map(); }
    get last() { return this.t.length ? this.t[this.t.length - 1] : 0; }
    // entries: [key, values] pairs, values aligned with t.
    merge(t, entries) {
      if (!Array.isArray(t)) return;
      // Two answers to the same since (polls that overlapped) must not
      // add a sample twice: only times after the last one are taken.
      const from = t.findIndex((x) => x > this.last);
      if (from < 0) return;
      if (from > 0) { t = t.slice(from); entries = Array.from(entries, ([k, v]) => [k, v.slice(from)]); }
      const old = this.t.length;
      this.t = this.t.concat(t);
      const seen = new Set();
      for (const [key, vals] of entries) {
        seen.add(key);
        let cur = this.series.get(key);
        if (!cur) { cur = new Array(old).fill(null); this.series.set(key, cur); }
        for (let i = 0; i < t.length; i++) cur.push(i < vals.length && isNum(vals[i]) ? vals[i] : null);
      }
      for (const [key, cur] of this.series) if (!seen.has(key)) for (let i = 0; i < t.length; i++) cur.push(null);
      const cut = this.t.findIndex((x) => x > this.last - this.span);
      if (cut > 0) {
        this.t = this.t.slice(cut);
        for (const [key, cur] of this.series) {
          cur.splice(0, cut);
          if (cur.every((v) => v === null)) this.series.delete(key);
        }
      }
    }
    get(key) { return this.series.get(key) || null; }
    // range is the time axis: the span, or less while the store is young
    // (at least a minute), so a fresh process does not draw in a corner.
    range() {
      const t1 = this.last, first = this.t.length ? this.t[0] : t1;
      return [Math.max(t1 - this.span, Math.min(first, t1 - 60000)), t1];
    }
  }

  function ago(ms) {
    const s = Math.round(ms / 1000);
    if (s < 120) return "\u2212" + s + " s";
    return "\u2212" + Math.round(s / 60) + " min";
  }

  // path draws values against times as SVG path data in a w×h box, with
  // y from 0 (bottom) to top; a gap starts a new subpath.
  function path(t, vals, t0, t1, top, w, h, pad) {
    let d = "", pen = false, n = 0;
    const sx = (w - pad.l - pad.r) / Math.max(1, t1 - t0), sy = (h - pad.t - pad.b) / top;
    for (let i = 0; i < t.length; i++) {
      const v = vals[i];
      if (!isNum(v) || t[i] < t0) { pen = false; continue; }
      const x = (pad.l + (t[i] - t0) * sx).toFixed(1), y = (h - pad.b - Math.min(v, top) * sy).toFixed(1);
      d += (pen ? "L" : "M") + x + " " + y;
      // A point alone between gaps is drawn as a dot (a zero-length line
      // with round caps).
      if (!pen && !isNum(vals[i + 1])) d += "h0";
      pen = true; n++;
    }
    return {d, n};
  }

  // rangeAttrs records the time range drawn, for tests and tools.
  const rangeAttrs = (t0, t1) => ' data-t0="' + t0 + '" data-t1="' + t1 + '"';

  function lastOf(t, vals) {
    for (let i = vals.length - 1; i >= 0; i--) if (isNum(vals[i])) return {t: t[i], v: vals[i]};
    return null;
  }

  // niceTop rounds a maximum up to 1, 2 or 5 times a power of ten.
  function niceTop(m) {
    if (!(m > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(m)));
    for (const f of [1, 2, 5, 10]) if (m <= f * p) return f * p;
    return 10 * p;
  }

  function topOf(lines, fixedTop) {
    if (fixedTop) return fixedTop;
    let m = 0;
    for (const l of lines) for (const v of l.values || []) if (isNum(v) && v > m) m = v;
    return niceTop(m);
  }

  function pathTag(l, i, p, t) {
    const last = lastOf(t, l.values || []);
    return '<path class="ln s' + (l.color !== undefined ? l.color : i) + '" d="' + p.d + '" data-field="' + esc(l.field || l.name) +
      '" data-n="' + p.n + '"' + (last ? ' data-t1="' + last.t + '" data-last="' + last.v + '"' : "") + "/>";
  }

  // spark draws a sparkline of lines ([{name, values}]) over the store's
  // span into el.
  function spark(el, store, lines, opts) {
    opts = opts || {};
    const w = 120, h = 28, pad = {l: 1, r: 1, t: 2, b: 2};
    const t = store.t, [t0, t1] = store.range();
    const top = topOf(lines, opts.top);
    let body = "";
    lines.forEach((l, i) => { body += pathTag(l, i, path(t, l.values || [], t0, t1, top, w, h, pad), t); });
    el.innerHTML = '<svg class="spark" viewBox="0 0 ' + w + " " + h + '" preserveAspectRatio="none" role="img"' + rangeAttrs(t0, t1) + ">" + body + "</svg>";
    if (opts.title) el.querySelector("svg").insertAdjacentHTML("afterbegin", "<title>" + esc(opts.title) + "</title>");
  }

  // chart draws a larger chart with a y scale, a time axis and a legend of
  // the latest values; fmt formats a value for the scale and the legend.
  function chart(el, store, title, lines, opts) {
    opts = opts || {};
    const fmt = opts.fmt || ((v) => String(v));
    const w = 360, h = 150, pad = {l: 44, r: 8, t: 8, b: 18};
    const t = store.t, [t0, t1] = store.range();
    const top = topOf(lines, opts.top);
    let grid = "";
    for (const f of [0, 0.5, 1]) {
      const y = (h - pad.b - f * (h - pad.t - pad.b)).toFixed(1);
      grid += '<line class="grid" x1="' + pad.l + '" x2="' + (w - pad.r) + '" y1="' + y + '" y2="' + y + '"/>' +
        '<text class="ax" x="' + (pad.l - 4) + '" y="' + y + '" dy="0.32em" text-anchor="end">' + esc(fmt(top * f)) + "</text>";
    }
    grid += '<text class="ax" x="' + pad.l + '" y="' + (h - 4) + '">' + ago(t1 - t0) + '</text>' +
      '<text class="ax" x="' + (w - pad.r) + '" y="' + (h - 4) + '" text-anchor="end">now</text>';
    let body = "", legend = "";
    lines.forEach((l, i) => {
      const c = l.color !== undefined ? l.color : i;
      body += pathTag(l, i, path(t, l.values || [], t0, t1, top, w, h, pad), t);
      const last = lastOf(t, l.values || []);
      legend += '<span class="lg"><i class="sw s' + c + '"></i>' + esc(l.name) + " <b>" + esc(last ? fmt(last.v) : "\u2014") + "</b></span>";
    });
    el.innerHTML = '<div class="ct">' + esc(title) + '</div><svg class="chart" viewBox="0 0 ' + w + " " + h + '" role="img"' + rangeAttrs(t0, t1) + ' aria-label="' +
      esc(title) + '">' + grid + body + '</svg><div class="legend">' + legend + "</div>";
  }

  // Visible draws only the charts on screen: observe(el, key) each time a
  // page renders an element; a key seen on screen before is drawn at once
  // (no flicker on re-render), others when they scroll into view.
  class Visible {
    constructor(draw) {
      this.draw = draw;
      this.keys = new Set();
      this.io = new IntersectionObserver((entries) => {
        for (const e of entries) {
          const key = e.target.dataset.chart;
          if (e.isIntersecting) {
            if (!e.target.firstChild) this.draw(e.target);
            this.keys.add(key);
          } else this.keys.delete(key);
        }
      }, {rootMargin: "100px"});
    }
    // reset forgets the elements of the last render (not the keys).
    reset() { this.io.disconnect(); }
    observe(el, key) {
      el.dataset.chart = key;
      if (this.keys.has(key)) this.draw(el);
      this.io.observe(el);
    }
  }

  return {Store, spark, chart, Visible, isNum};
})();
