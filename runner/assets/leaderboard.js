// The leaderboard page's script (runner/leaderboard.py inlines it): builds the table and the chart of
// positions from the JSON the page embeds, sorts, filters and switches the protocol of the score columns,
// keeps that state in the URL (#protocol=...&sort=...) and downloads the table as shown as CSV. It fetches
// nothing.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("leaderboard-data").textContent);
  const ranked = data.rank.protocols || [];
  const shifted = ranked.filter((p) => p !== data.baseline);
  const protocolById = Object.fromEntries(data.protocols.map((p) => [p.id, p]));
  const benchById = Object.fromEntries(data.benchmarks.map((b) => [b.id, b]));
  const figById = Object.fromEntries(data.figures.map((f) => [f.id, f]));
  const last = (xs) => xs[xs.length - 1];
  const state = {
    protocol: last(ranked) || last(data.protocols).id,
    sort: ranked.length ? { key: "rank:" + last(ranked), dir: 1 } : { key: "model", dir: 1 },
    family: "", size: "", type: "", role: "", query: "",
  };
  const FILTERS = ["family", "size", "type", "role"];
  const base = protocolById[data.baseline] || data.protocols[0];
  const downstream = data.benchmarks.filter((b) => (ranked.length ? b.ranked : b.higher_is_better));

  // ------------------------------------------------------------------ the state in the URL
  function readUrl() {
    const h = new URLSearchParams(location.hash.slice(1));
    if (protocolById[h.get("protocol")]) state.protocol = h.get("protocol");
    if (h.get("sort")) state.sort = { key: h.get("sort"), dir: h.get("dir") === "-1" ? -1 : 1 };
    for (const k of FILTERS) state[k] = h.get(k) || "";
    state.query = h.get("q") || "";
  }
  function writeUrl() {
    const h = new URLSearchParams({ protocol: state.protocol, sort: state.sort.key, dir: state.sort.dir });
    for (const k of FILTERS) if (state[k]) h.set(k, state[k]);
    if (state.query) h.set("q", state.query);
    history.replaceState(null, "", "#" + h.toString());
  }
  readUrl();

  // ------------------------------------------------------------------ small helpers
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "style") node.style.cssText = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const fmt = (v, digits) => (v === null || v === undefined ? "" : v.toFixed(digits));
  const signed = (v, digits) => (v > 0 ? "+" : v < 0 ? "\u2212" : "\u00b1") + Math.abs(v).toFixed(digits);
  const pct = (level) => Math.round(100 * (level || 0.95)) + " %";
  // a figure by its number (figures.html's) and short name; the title in full on hover
  function figLinks(ids) {
    return (ids || []).map((id) => {
      const f = figById[id];
      return el("a", { class: "fig", href: f.href, title: `Figure ${id}: ${f.title} (${f.stage})` },
        `Fig. ${id} ${f.name.replace(/_/g, " ")}`);
    });
  }
  const chartLink = () => el("a", { class: "fig", href: "#slope", title: "the chart of every model's position" },
    "position chart");
  const pos = (m, p) => (m.rank[p] ? m.rank[p].pos : null);

  // ------------------------------------------------------------------ columns
  // Every column: key (what a header click sorts by), its header, the value it sorts on, its cell and
  // the direction a first click sorts in (1: ascending; ranks low first, scores best first).
  function columns() {
    const cols = [
      { key: "pos", label: "#", title: "position in the current order", group: "model" },
      { key: "model", label: "Model", group: "model", dir: 1, value: (m) => m.label.toLowerCase(),
        cell: modelCell },
      { key: "family", label: "Family", group: "model", dir: 1, value: (m) => m.family.toLowerCase(),
        cell: (m) => el("td", {}, labelOf(m.family)) },
      { key: "size", label: "Size", title: "parameters", group: "model", dir: -1, num: true,
        value: (m) => m.params_b, cell: (m) => el("td", { class: "num", "data-value": m.params_b }, m.size_label) },
      { key: "type", label: "Type", title: "base or instruction-tuned (mini world: prepared for its tasks or not)",
        group: "model", dir: 1, value: (m) => m.type, cell: (m) => el("td", { class: "type-" + m.type }, m.type) },
    ];
    if (data.columns.prepared) {
      cols.push({ key: "prepared", label: "Prepared on", title: "what the model's last pre-training phase added",
        group: "model", dir: 1, value: (m) => m.prepared || "", cell: (m) => el("td", { class: "prep" }, m.prepared || "") });
    }
    for (const p of ranked) {
      cols.push({ key: "pos:" + p, label: protocolById[p].label, group: "pos", dir: 1, num: true, chart: true,
        title: `place in the order of mean ranks under ${protocolById[p].label} (1 = best)`,
        value: (m) => pos(m, p), cell: (m) => el("td", { class: "num", "data-key": "pos:" + p, "data-value": pos(m, p) },
          pos(m, p) ?? "\u2013") });
    }
    for (const p of shifted) {
      cols.push({ key: "move:" + p, label: `${base.label} \u2192 ${protocolById[p].label}`, group: "pos", dir: -1,
        num: true, chart: true, title: "position under each protocol; the arrow: places moved up or down",
        value: (m) => (pos(m, p) === null || pos(m, data.baseline) === null ? null : pos(m, data.baseline) - pos(m, p)),
        cell: (m) => moveCell(m, p) });
    }
    for (const p of ranked) {
      cols.push({ key: "rank:" + p, label: protocolById[p].label, group: "rank", dir: 1, num: true, chart: true,
        protocol: p, figures: data.rank.figures, value: (m) => (m.rank[p] ? m.rank[p].mean : null),
        cell: (m) => rankCell(m, p) });
    }
    for (const p of shifted) {
      cols.push({ key: "shift:" + p, label: protocolById[p].label, chart: true,
        title: `mean rank under ${base.label} minus under ${protocolById[p].label}: ▲ the model moved up`,
        group: "shift", dir: 1, num: true, value: (m) => (m.shift[p] ? m.shift[p].value : null),
        cell: (m) => shiftCell(m, p) });
    }
    cols.push({ key: "avg", label: "Average", group: "avg", dir: -1, num: true,
      title: `mean score over the ${downstream.length} ${ranked.length ? "ranked " : ""}benchmarks under the selected ` +
        "protocol (bits per byte left out); empty where a score is missing",
      value: average, cell: (m) => el("td", { class: "num", "data-key": "avg", "data-value": average(m) }, fmt(average(m), 3)) });
    for (const cat of data.categories) {
      for (const id of cat.benchmarks) {
        const b = benchById[id];
        cols.push({ key: "score:" + id, label: b.label + (b.higher_is_better ? "" : " \u2193"), group: "cat:" + cat.name,
          dir: b.higher_is_better ? -1 : 1,
          num: true, bench: b, figures: b.figures,
          title: `${b.label}: ${b.metric}${b.higher_is_better ? "" : ", lower is better"}` +
            (b.ranked ? "" : "; not in the mean rank"),
          value: (m) => score(m, id), cell: (m) => scoreCell(m, b) });
      }
    }
    cols.push({ key: "figs", label: "Figures", title: "the figures that show every model", group: "figs",
      cell: (m) => el("td", { class: "figs" }, figLinks(m.figures)) });
    return cols;
  }
  const labelOf = (fam) => (data.families.find((f) => f.name === fam) || { label: fam }).label;
  const score = (m, id) => ((m.scores[state.protocol] || {})[id] ?? null);
  function average(m) {
    const vs = downstream.map((b) => score(m, b.id));
    return vs.length && vs.every((v) => v !== null) ? vs.reduce((a, v) => a + v, 0) / vs.length : null;
  }

  function modelCell(m) {
    const badge = m.role ? el("span", { class: "badge badge-" + m.role, title: roleTitle(m.role) }, m.role) : null;
    return el("td", { class: "model", title: m.id },
      el("span", { class: "dot", style: `background:${m.color}` }), el("span", { class: "name" }, m.label), badge);
  }
  function roleTitle(role) {
    const pl = data.placement || {};
    return role === "placed"
      ? `placed by this profile among the ${pl.reference_models || "reference"} models of '${pl.reference}'`
      : `a model of '${pl.reference}' re-run here to check the run reproduces it`;
  }
  function rankCell(m, p) {
    const r = m.rank[p];
    if (!r) return el("td", { class: "num missing", "data-key": "rank:" + p }, "\u2013");
    return el("td", { class: "num rank", "data-key": "rank:" + p, "data-value": r.mean,
      title: `mean rank ${fmt(r.mean, 2)} of ${r.of} models over ${r.n} benchmarks; ${pct(data.rank.level)} ` +
        `interval [${fmt(r.lo, 2)}, ${fmt(r.hi, 2)}]` },
      fmt(r.mean, 1), el("span", { class: "ci" }, ` [${fmt(r.lo, 1)}, ${fmt(r.hi, 1)}]`));
  }
  const arrow = (way) => el("span", { class: "arrow" }, way === "up" ? "\u25b2" : way === "down" ? "\u25bc" : "=");
  // the shift in mean rank, shown as how far the model moved (▲ up, ▼ down) with its interval in the same
  // sense; data-value keeps mean_ranks.csv's signed shift (negative: up)
  function shiftCell(m, p) {
    const s = m.shift[p];
    if (!s) return el("td", { class: "num missing", "data-key": "shift:" + p }, "\u2013");
    const way = s.value < 0 ? "up" : s.value > 0 ? "down" : "same";
    const [lo, hi] = way === "up" ? [-s.hi, -s.lo] : [s.lo, s.hi];
    return el("td", { class: "num shift " + way, "data-key": "shift:" + p, "data-value": s.value,
      title: `mean rank ${signed(s.value, 2)}; ${pct(data.rank.level)} interval [${fmt(s.lo, 2)}, ${fmt(s.hi, 2)}] ` +
        "(paired over benchmarks)" },
      arrow(way), fmt(Math.abs(s.value), 1), el("span", { class: "ci" }, ` [${fmt(lo, 1)}, ${fmt(hi, 1)}]`));
  }
  function moveCell(m, p) {
    const [from, to] = [pos(m, data.baseline), pos(m, p)];
    if (from === null || to === null) return el("td", { class: "num missing", "data-key": "move:" + p }, "\u2013");
    const way = to < from ? "up" : to > from ? "down" : "same";
    return el("td", { class: "num shift " + way, "data-key": "move:" + p, "data-value": from - to, "data-from": from,
      "data-to": to, title: `position ${from} under ${base.label}, ${to} under ${protocolById[p].label}` },
      `${from} \u2192 ${to} `, arrow(way), way === "same" ? "" : Math.abs(from - to));
  }
  let extent = {};
  function scoreCell(m, b) {
    const v = score(m, b.id);
    if (v === null) return el("td", { class: "num missing", "data-key": "score:" + b.id }, "\u2013");
    const se = (m.stderr[state.protocol] || {})[b.id];
    const [lo, hi] = extent[b.id] || [v, v];
    let share = hi > lo ? (v - lo) / (hi - lo) : 1;
    if (!b.higher_is_better) share = 1 - share;
    const color = protocolById[state.protocol].color;
    return el("td", { class: "num score", "data-key": "score:" + b.id, "data-value": v,
      title: `${b.label} (${protocolById[state.protocol].label}): ${v}` + (se === null || se === undefined ? "" : ` \u00b1 ${se}`),
      style: `background-image:linear-gradient(90deg, ${color}2e ${(100 * share).toFixed(1)}%, transparent 0)` },
      fmt(v, 3));
  }

  // ------------------------------------------------------------------ filtering and sorting
  function visible() {
    const q = state.query.trim().toLowerCase();
    return data.models.filter((m) =>
      (!state.family || m.family === state.family) && (!state.size || m.size === state.size) &&
      (!state.type || m.type === state.type) && (!state.role || (state.role === "placed" ? m.role === "placed" : m.role !== "placed")) &&
      (!q || m.id.toLowerCase().includes(q) || m.label.toLowerCase().includes(q) || m.family.toLowerCase().includes(q) ||
        (m.prepared || "").toLowerCase().includes(q)));
  }
  function sorted(models, col) {
    const dir = state.sort.dir;
    const key = (m) => { const v = col.value(m); return v === undefined || v === null || Number.isNaN(v) ? null : v; };
    return models.map((m) => [key(m), m]).sort(([a, ma], [b, mb]) => {
      if (a === null || b === null) return a === null && b === null ? cmp(ma.id, mb.id) : a === null ? 1 : -1;
      return dir * cmp(a, b) || cmp(ma.id, mb.id);
    }).map(([, m]) => m);
  }
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

  // ------------------------------------------------------------------ drawing
  const root = el("main", {});
  document.body.append(root);
  let cols = columns();

  function header() {
    const pl = data.placement;
    const r = data.rank;
    const nDown = data.benchmarks.filter((b) => b.ranked).length;
    const rankText = ranked.length
      ? `Mean rank: a model's rank on each of the ${r.n_benchmarks} downstream benchmarks (1 = best, ties share), ` +
        `averaged; brackets: its ${pct(r.level)} bootstrap interval over benchmarks. Position: its place in the ` +
        `order of mean ranks, and how many places it moves from ${base.label} to ` +
        `${shifted.map((p) => protocolById[p].label).join(" / ") || "the other protocol"}. `
      : "No model is ranked in this profile: the table shows scores only. ";
    const unranked = data.protocols.filter((p) => !ranked.includes(p.id));
    const scoresOnly = ranked.length && unranked.length
      ? `${unranked.map((p) => p.label).join("; ")}: scores only (the mean ranks compare ` +
        `${ranked.map((p) => protocolById[p].label).join(" and ")}). ` : "";
    return el("header", {},
      el("h1", {}, "Leaderboard: ", el("code", {}, data.profile)),
      el("p", { class: "description" }, data.description),
      el("p", { class: "meta" },
        `${data.models.length} models \u00d7 ${data.benchmarks.length} benchmarks` +
          (nDown < data.benchmarks.length && ranked.length ? ` (${nDown} ranked)` : "") +
          ` under ${data.protocols.length} protocols: ${data.protocols.map((p) => p.label).join("; ")}. ${rankText}` +
          scoresOnly + "Bars behind a score: where it lies between the lowest and the highest score of its column " +
          "(best full); \u2193 marks bits per byte, where lower is better. Written " + data.written + "; ",
        el("a", { href: "#slope" }, "chart of positions"), "; ", el("a", { href: "figures.html" }, "all figures"), "."),
      pl ? el("section", { class: "placement" },
        el("h2", {}, pl.comparable === false ? "Placement: not comparable, nothing ranked" : "Placed models"),
        el("p", {}, `This profile places ${pl.new.length} new model(s) (marked `, el("span", { class: "badge badge-placed" }, "placed"),
          `) among the models of '${pl.reference}': trained and tested here with the reference's recipe, split ` +
          `rule, benchmarks and metrics. A placed model's mean rank is among the reference's models and the new ` +
          `ones; a reference model's among the reference's alone. `,
          pl.calibration.length ? el("span", {}, "Calibration model(s) (marked ", el("span", { class: "badge badge-calibration" }, "calibration"),
            `): ${pl.calibration.join(", ")}, re-run here; their rows show the reference's scores. `) : null,
          pl.reference_page ? el("a", { href: pl.reference_page }, `The leaderboard of '${pl.reference}'.`) : null),
        el("ul", { class: "lines" }, pl.lines.map((line) => el("li", {}, line)))) : null,
      data.notes.length ? el("ul", { class: "notes" }, data.notes.map((n) => el("li", {}, n))) : null);
  }

  function option(value, label, current) { return el("option", { value, selected: value === current }, label); }
  function controls() {
    const sel = (id, label, opts, key) => el("label", {}, label + " ", el("select", { id, onchange: (e) => { state[key] = e.target.value; draw(); } },
      opts.map(([v, l]) => option(v, l, state[key]))));
    const types = [...new Set(data.models.map((m) => m.type))].sort();
    const parts = [
      el("label", {}, "Search ", el("input", { id: "search", type: "search", placeholder: "model, family, preparation",
        value: state.query, oninput: (e) => { state.query = e.target.value; drawBody(); } })),
      sel("family", "Family", [["", "all families"], ...data.families.map((f) => [f.name, `${f.label} (${f.count})`])], "family"),
      sel("size", "Size", [["", "all sizes"], ...data.sizes.map((s) => [s, s])], "size"),
      sel("type", "Type", [["", "base and instruct"], ...types.map((t) => [t, t])], "type"),
    ];
    if (data.placement) parts.push(sel("role", "Rows", [["", "every model"], ["placed", "placed only"], ["reference", "reference only"]], "role"));
    parts.push(el("fieldset", { class: "switch", id: "protocol" }, el("legend", {}, "Scores under"),
      data.protocols.map((p) => el("label", { style: `--c:${p.color}` },
        el("input", { type: "radio", name: "protocol", value: p.id, checked: p.id === state.protocol,
          onchange: () => { state.protocol = p.id; draw(); } }), p.label))));
    parts.push(el("button", { type: "button", id: "csv", title: "the rows and columns as shown, in this order",
      onclick: downloadCsv }, "Download CSV"));
    parts.push(el("span", { id: "count", class: "meta" }));
    const legend = el("div", { class: "legend" }, data.families.map((f) =>
      el("button", { type: "button", class: "chip" + (state.family === f.name ? " on" : ""), "data-family": f.name,
        title: `show only ${f.label} (click again for all)`,
        onclick: () => { state.family = state.family === f.name ? "" : f.name; draw(); } },
      el("span", { class: "dot", style: `background:${f.color}` }), `${f.label} ${f.count}`)));
    return el("div", { class: "controls" }, legend, el("div", { class: "filters" }, parts));
  }

  function thead() {
    const groups = [];
    for (const c of cols) {
      const g = last(groups);
      if (g && g.id === c.group) g.n += 1; else groups.push({ id: c.group, n: 1 });
    }
    const groupLabel = (id) => ({ model: "", figs: "", pos: "Position (1 = best)", avg: "",
      rank: `Mean rank (${pct(data.rank.level)} interval)`, shift: `Mean-rank change from ${base.label}` }[id] ??
      id.slice(4) + ` \u00b7 ${protocolById[state.protocol].label}`);
    const top = el("tr", { class: "groups" }, groups.map((g) => el("th", { colspan: g.n, class: "group g-" + g.id.split(":")[0],
      scope: "colgroup" }, groupLabel(g.id))));
    const heads = el("tr", {}, cols.map((c) => {
      const active = state.sort.key === c.key;
      const aria = active ? (state.sort.dir === 1 ? "ascending" : "descending") : null;
      const label = c.value
        ? el("button", { type: "button", class: "sort", title: (c.title ? c.title + "; " : "") + "click to sort",
          onclick: () => sortBy(c) }, c.label, el("span", { class: "arrow" }, active ? (state.sort.dir === 1 ? " \u25b4" : " \u25be") : ""))
        : el("span", { title: c.title || "" }, c.label);
      const links = [...figLinks(c.figures), ...(c.chart ? [chartLink()] : [])];
      return el("th", { "data-key": c.key, scope: "col", "aria-sort": aria, "data-csv": [groupLabel(c.group), c.label].filter(Boolean).join(": "),
        class: (c.num ? "num " : "") + (c.bench && !c.bench.ranked ? "unranked" : "") },
        label, links.length ? el("span", { class: "figrefs" }, links) : null);
    }));
    return el("thead", {}, top, heads);
  }

  function sortBy(c) {
    state.sort = state.sort.key === c.key ? { key: c.key, dir: -state.sort.dir } : { key: c.key, dir: c.dir || 1 };
    draw();
  }

  let tbody = el("tbody", { id: "rows" });
  function drawBody() {
    extent = {};
    for (const b of data.benchmarks) {
      const vs = data.models.map((m) => score(m, b.id)).filter((v) => v !== null);
      if (vs.length) extent[b.id] = [Math.min(...vs), Math.max(...vs)];
    }
    const col = cols.find((c) => c.key === state.sort.key) || cols[1];
    const rows = sorted(visible(), col);
    const body = el("tbody", { id: "rows" }, rows.map((m, i) => el("tr", { "data-model": m.id, "data-family": m.family,
      class: m.role ? "role-" + m.role : null }, cols.map((c) => (c.key === "pos" ? el("td", { class: "num pos" }, i + 1) : c.cell(m))))));
    if (!rows.length) {
      body.append(el("tr", { class: "empty" }, el("td", { colspan: cols.length, id: "no-match" },
        "No model matches these filters and this search.")));
    }
    tbody.replaceWith(body);
    tbody = body;
    document.getElementById("count").textContent = `${rows.length} of ${data.models.length} models`;
    slope(new Set(rows.map((m) => m.id)));
    writeUrl();
  }

  // ------------------------------------------------------------------ CSV of the table as shown
  function tableCsv() {
    const quote = (v) => (/[",\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : v);
    const head = [...document.querySelectorAll("#board thead tr:last-child th")].map((th) => th.dataset.csv);
    const rows = [...document.querySelectorAll("#rows tr[data-model]")].map((tr) => [...tr.children].map((td) => td.textContent));
    return [head, ...rows].map((r) => r.map(quote).join(",")).join("\n") + "\n";
  }
  function downloadCsv() {
    const a = el("a", { href: URL.createObjectURL(new Blob([tableCsv()], { type: "text/csv" })),
      download: `${data.profile}-leaderboard.csv` });
    document.body.append(a);
    a.click();
    a.remove();
  }

  // ------------------------------------------------------------------ the chart of positions (slope chart)
  // every model's position under the baseline (left) joined to its position under the last ranked protocol
  // (right, with the model's name: narrow enough for a phone), in its family's colour; models the filters
  // hide are drawn faint
  const slopeBox = el("section", { class: "slope", id: "slope" });
  function slope(shown) {
    const [a, b] = [data.baseline, last(shifted)];
    const ms = b ? data.models.filter((m) => pos(m, a) !== null && pos(m, b) !== null) : [];
    if (!ms.length) return slopeBox.replaceChildren();
    const NS = Object.assign(document.createElement("div"), { innerHTML: "<svg></svg>" }).firstChild.namespaceURI;  // no URL in the page
    const svg = (tag, attrs, ...kids) => {
      const node = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      node.append(...kids);
      return node;
    };
    const n = Math.max(...ms.map((m) => Math.max(pos(m, a), pos(m, b))));
    const [w, row, top, left, right] = [440, 13, 26, 70, 250];
    const y = (p) => top + (p - 1) * row;
    const chart = svg("svg", { viewBox: `0 0 ${w} ${top + n * row}`, role: "img", "aria-label": "positions under both protocols" },
      svg("text", { x: left - 30, y: 12, class: "head" }, protocolById[a].label),
      svg("text", { x: right - 10, y: 12, class: "head" }, protocolById[b].label));
    for (const m of ms) {
      const faint = shown.has(m.id) ? "" : " faint";
      chart.append(svg("g", { class: "model" + faint, "data-model": m.id },
        svg("title", {}, `${m.label}: ${pos(m, a)} \u2192 ${pos(m, b)}`),
        svg("line", { x1: left + 4, y1: y(pos(m, a)), x2: right - 4, y2: y(pos(m, b)), stroke: m.color }),
        svg("text", { x: left, y: y(pos(m, a)) + 4, "text-anchor": "end" }, pos(m, a)),
        svg("text", { x: right, y: y(pos(m, b)) + 4 }, `${pos(m, b)} ${m.label}`)));
    }
    slopeBox.replaceChildren(el("h2", {}, "Positions under both protocols"),
      el("p", { class: "meta" }, `Each line joins a model's position under ${protocolById[a].label} (left) to its ` +
        `position under ${protocolById[b].label} (right); colours: families. Hover a line for its model.`), chart);
  }

  function figureList() {
    return el("section", { class: "figures" }, el("h2", {}, "Figures"),
      data.figures.length ? el("ol", {}, data.figures.map((f) => el("li", { value: f.id },
        el("a", { href: f.href }, f.title), el("span", { class: "meta" }, ` \u00b7 ${f.stage} \u00b7 `),
        el("a", { href: f.png, class: "meta" }, "PNG")))) : el("p", { class: "meta" }, "This profile wrote no figure."));
  }

  function draw() {
    cols = columns();
    const table = el("table", { id: "board" }, thead(), tbody);
    root.replaceChildren(header(), controls(), el("div", { class: "scroll" }, table), slopeBox, figureList());
    drawBody();
  }
  draw();
  document.body.dataset.ready = "1";
})();
