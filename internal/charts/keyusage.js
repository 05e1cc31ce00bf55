
// KeyUsage formats one key's usage (an entry of a /stats.json "keys"
// array, internal/keys.Usage) for the Keys tables of both pages; n
// formats a count.
const KeyUsage = (() => {
  "use strict";
  function limits(k, n) {
    const parts = [];
    if (k.rpm > 0) parts.push(n(k.rpm) + " req/min");
    if (k.units_per_minute > 0) parts.push(n(k.units_per_minute) + " " + k.unit + "/min");
    if (k.max_concurrent > 0) parts.push(n(k.max_concurrent) + " at once");
    return parts.length ? parts.join(", ") : "none";
  }
  // remaining is what is left of the minute's budgets (-1: no limit).
  function remaining(k, n) {
    const parts = [];
    if (k.remaining_requests >= 0) parts.push(n(k.remaining_requests) + " req");
    if (k.remaining_units >= 0) parts.push(n(k.remaining_units) + " " + k.unit);
    return parts.length ? parts.join(", ") : "no limit";
  }
  // byClass sums the answers by status: ok 2xx, refused 4xx, failed 5xx
  // and 499 (the client went away before its answer).
  function byClass(requests) {
    const out = {ok: 0, refused: 0, failed: 0};
    for (const code in requests || {}) {
      const c = +code, v = requests[code];
      if (c >= 200 && c < 300) out.ok += v; else if (c >= 400 && c < 500 && c !== 499) out.refused += v; else out.failed += v;
    }
    return out;
  }
  // codes lists the answers by status code, for a cell's title.
  function codes(requests, n) {
    return Object.keys(requests || {}).sort().map((x) => x + ": " + n(requests[x])).join(", ") || "no requests";
  }
  // reasons lists the refusals by reason, those that happened only.
  function reasons(r, n, sep) {
    const names = Object.keys(r || {}).filter((x) => r[x] > 0).sort();
    return names.length ? names.map((x) => x + " " + n(r[x])).join(sep) : "none";
  }
  return {limits, remaining, byClass, codes, reasons};
})();
