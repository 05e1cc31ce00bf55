// Hand-drawn SVG time-series charts shared by the router's status page and
// the supervisor's UI (inlined into each page; no build step, no fetch).
// Gaps (null) break a line; they are never drawn as zero.
const Charts = (() => {
  "use strict";
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");

  // Store holds what a page has read from a series route: the sample times
  // t (unix ms, ascending) and, per key, the values at those times, for the
  // last spanMs. Answers are merged by time, so answers that overlap (a
  // poll and a first read of a newly visible row) neither repeat a sample
  // nor blank each other's values.
  class Store {
    constructor(spanMs) { this.span = spanMs; this.t = []; this.series = new Map(); }
    get last() { return this.t.length ? this.t[this.t.length - 1] : 0; }
    // merge takes times t and [key, values] entries aligned with t.
    merge(t, entries) {
      if (!Array.isArray(t) || t.length === 0) return;
      const grow = t.filter((x) => x > this.last);
      if (grow.length) {
        this.t = this.t.concat(grow);
        for (const cur of this.series.values()) for (let i = 0; i < grow.length; i++) cur.push(null);
      }
      const at = new Map(this.t.map((x, i) => [x, i]));
      for (const [key, vals] of entries) {
        let cur = this.series.get(key);
        if (!cur) { cur = new Array(this.t.length).fill(null); this.series.set(key, cur); }
        for (let i = 0; i < t.length; i++) {
          const j = at.get(t[i]);
          if (j !== undefined && isNum(vals[i])) cur[j] = vals[i];
        }
      }
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

  // The sample a pointer rests on, by chart key and time, so that the
  // readout stays on the same sample when the chart is drawn again.
  let hover = null;

  // chart draws a larger chart with a y scale, a time axis and a legend of
  // the latest values; fmt formats a value for the scale and the legend.
  // Pointing at the chart shows the values of the nearest sample instead.
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
      legend += '<span class="lg"><i class="sw s' + c + '"></i>' + esc(l.name) + " <b></b></span>";
    });
    el.innerHTML = '<div class="ct">' + esc(title) + '<span class="at"></span></div><svg class="chart" viewBox="0 0 ' + w + " " + h +
      '" role="img"' + rangeAttrs(t0, t1) + ' aria-label="' + esc(title) + '">' + grid + body +
      '<line class="cursor" y1="' + pad.t + '" y2="' + (h - pad.b) + '" visibility="hidden"/></svg><div class="legend">' + legend + "</div>";
    const svg = el.querySelector("svg"), cursor = svg.querySelector(".cursor"), at = el.querySelector(".at");
    const vals = el.querySelectorAll(".legend b");
    const sx = (w - pad.l - pad.r) / Math.max(1, t1 - t0);
    // show fills the legend with the values at sample i (-1: the latest).
    const show = (i) => {
      lines.forEach((l, k) => {
        const v = l.values || [];
        const p = i < 0 ? lastOf(t, v) : (isNum(v[i]) ? {v: v[i]} : null);
        vals[k].textContent = p ? fmt(p.v) : "\u2014";
      });
      if (i < 0) { cursor.setAttribute("visibility", "hidden"); at.textContent = ""; return; }
      const x = (pad.l + (t[i] - t0) * sx).toFixed(1);
      cursor.setAttribute("x1", x); cursor.setAttribute("x2", x); cursor.setAttribute("visibility", "visible");
      at.textContent = " \u00b7 " + ago(t1 - t[i]).replace("\u2212", "") + " ago";
    };
    const nearest = (ms) => {
      let best = -1, d = Infinity;
      for (let i = 0; i < t.length; i++) if (t[i] >= t0 && Math.abs(t[i] - ms) < d) { d = Math.abs(t[i] - ms); best = i; }
      return best;
    };
    const key = el.dataset.chart || title;
    svg.addEventListener("pointermove", (ev) => {
      const r = svg.getBoundingClientRect();
      const ms = t0 + ((ev.clientX - r.left) / r.width * w - pad.l) / sx;
      const i = nearest(ms);
      hover = i < 0 ? null : {key, ms: t[i]};
      show(i);
    });
    svg.addEventListener("pointerleave", () => { hover = null; show(-1); });
    show(hover && hover.key === key ? t.indexOf(hover.ms) : -1);
  }

  // Feed keeps a Store filled for the ids (models, servers) whose charts
  // are on screen, so a page of hundreds of rows reads the series of the
  // few it shows: need(id) when a chart of id is drawn; poll() every
  // interval reads what is new for the ids seen so far. load(ids, since)
  // returns a promise of [t, entries]; changed() is called after a first
  // read, to redraw.
  class Feed {
    constructor(store, load, changed) {
      this.store = store; this.load = load; this.changed = changed;
      this.ids = new Set(); this.pending = new Set(); this.timer = null;
    }
    need(id) {
      if (this.ids.has(id) || this.pending.has(id)) return;
      this.pending.add(id);
      if (!this.timer) this.timer = setTimeout(() => this.first(), 0);
    }
    async first() {
      this.timer = null;
      const ids = Array.from(this.pending);
      this.pending.clear();
      try {
        const [t, entries] = await this.load(ids, 0);
        this.store.merge(t, entries);
        for (const id of ids) this.ids.add(id);
        this.changed();
      } catch (e) {
        // Asked again when the chart is drawn next.
      }
    }
    // poll reads the samples after the last one held; it throws when the
    // route does not answer, for the page to say so.
    async poll() {
      if (this.ids.size === 0) return;
      const [t, entries] = await this.load(Array.from(this.ids), this.store.last);
      this.store.merge(t, entries);
    }
  }

  // Visible draws only the charts on screen: observe(el, key) each time a
  // page renders an element; a key seen on screen before is drawn at once
  // (no flicker on re-render), others when they scroll into view.
  class Visible {
    constructor(draw) {
      this.draw = draw;
      this.keys = new Set();
      this.shown = new Set(); // elements on screen
      this.io = new IntersectionObserver((entries) => {
        for (const e of entries) {
          const key = e.target.dataset.chart;
          if (e.isIntersecting) {
            if (!e.target.firstChild) this.draw(e.target);
            this.keys.add(key);
            this.shown.add(e.target);
          } else {
            this.keys.delete(key);
            this.shown.delete(e.target);
          }
        }
      }, {rootMargin: "100px"});
    }
    // reset forgets the elements of the last render (not the keys).
    reset() { this.io.disconnect(); this.shown.clear(); }
    // redraw draws again every chart on screen.
    redraw() { for (const el of this.shown) if (el.isConnected) this.draw(el); }
    observe(el, key) {
      el.dataset.chart = key;
      if (this.keys.has(key)) this.draw(el);
      this.io.observe(el);
    }
  }

  return {Store, Feed, spark, chart, Visible, isNum};
})();
