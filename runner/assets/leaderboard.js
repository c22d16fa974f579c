// The leaderboard page's script (runner/leaderboard.py inlines it): builds the table from the JSON the
// page embeds, sorts, filters and switches the protocol of the score columns. It fetches nothing.
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
  function figLinks(ids) {
    return (ids || []).map((id) => {
      const f = figById[id];
      return el("a", { class: "fig", href: f.href, title: `Figure ${id}: ${f.title} (${f.stage})` }, String(id));
    });
  }

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
      cols.push({ key: "rank:" + p, label: protocolById[p].label, group: "rank", dir: 1, num: true,
        protocol: p, figures: data.rank.figures, value: (m) => (m.rank[p] ? m.rank[p].mean : null),
        cell: (m) => rankCell(m, p) });
    }
    for (const p of shifted) {
      cols.push({ key: "shift:" + p, label: protocolById[p].label,
        title: `mean rank under ${protocolById[p].label} minus under ${protocolById[data.baseline].label}: ` +
          "negative moves the model up",
        group: "shift", dir: 1, num: true, value: (m) => (m.shift[p] ? m.shift[p].value : null),
        cell: (m) => shiftCell(m, p) });
    }
    for (const cat of data.categories) {
      for (const id of cat.benchmarks) {
        const b = benchById[id];
        cols.push({ key: "score:" + id, label: b.label, group: "cat:" + cat.name, dir: b.higher_is_better ? -1 : 1,
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
  function shiftCell(m, p) {
    const s = m.shift[p];
    if (!s) return el("td", { class: "num missing", "data-key": "shift:" + p }, "\u2013");
    const way = s.value < 0 ? "up" : s.value > 0 ? "down" : "same";
    return el("td", { class: "num shift " + way, "data-key": "shift:" + p, "data-value": s.value,
      title: `${pct(data.rank.level)} interval [${fmt(s.lo, 2)}, ${fmt(s.hi, 2)}] (paired over benchmarks)` },
      el("span", { class: "arrow" }, way === "up" ? "\u25b2" : way === "down" ? "\u25bc" : "\u25cf"), signed(s.value, 1),
      el("span", { class: "ci" }, ` [${signed(s.lo, 1)}, ${signed(s.hi, 1)}]`));
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
      ? `Mean rank: each model's rank on each of the ${r.n_benchmarks} downstream benchmarks (1 = best, ties share), ` +
        `averaged; brackets: its ${pct(r.level)} bootstrap interval over benchmarks (${r.n_boot} draws), paired ` +
        `between the protocols for the shift. From ${r.source}.`
      : "";
    return el("header", {},
      el("h1", {}, "Leaderboard of profile ", el("code", {}, data.profile)),
      el("p", { class: "description" }, data.description),
      el("p", { class: "meta" },
        `${data.models.length} models \u00d7 ${data.benchmarks.length} benchmarks` +
          (nDown < data.benchmarks.length && ranked.length ? ` (${nDown} ranked)` : "") +
          ` under ${data.protocols.map((p) => p.label).join(", ")}. ${rankText} Scores: the results store ` +
          `(the rows of 02's tbt_scores.csv and 03's direct_scores.csv where the profile runs them). Written ${data.written}; `,
        el("a", { href: "figures.html" }, "all figures"), "."),
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
    const groupLabel = (id) => id === "model" ? "" : id === "rank" ? `Mean rank (${pct(data.rank.level)} interval)`
      : id === "shift" ? `Rank shift from ${protocolById[data.baseline].label}` : id === "figs" ? "" : id.slice(4) + ` \u00b7 ${protocolById[state.protocol].label}`;
    const top = el("tr", { class: "groups" }, groups.map((g) => el("th", { colspan: g.n, class: "group g-" + g.id.split(":")[0],
      scope: "colgroup" }, groupLabel(g.id))));
    const heads = el("tr", {}, cols.map((c) => {
      const active = state.sort.key === c.key;
      const aria = active ? (state.sort.dir === 1 ? "ascending" : "descending") : null;
      const label = c.value
        ? el("button", { type: "button", class: "sort", title: (c.title ? c.title + "; " : "") + "click to sort",
          onclick: () => sortBy(c) }, c.label, el("span", { class: "arrow" }, active ? (state.sort.dir === 1 ? " \u25b4" : " \u25be") : ""))
        : el("span", { title: c.title || "" }, c.label);
      return el("th", { "data-key": c.key, scope: "col", "aria-sort": aria, class: (c.num ? "num " : "") + (c.bench && !c.bench.ranked ? "unranked" : "") },
        label, c.figures && c.figures.length ? el("span", { class: "figrefs" }, figLinks(c.figures)) : null);
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
    tbody.replaceWith(body);
    tbody = body;
    document.getElementById("count").textContent = `${rows.length} of ${data.models.length} models`;
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
    root.replaceChildren(header(), controls(), el("div", { class: "scroll" }, table), figureList());
    drawBody();
  }
  draw();
  document.body.dataset.ready = "1";
})();
