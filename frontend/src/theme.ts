// TensorBoard's light or dark theme, followed by the tab. TensorBoard marks dark mode with the
// class "dark-mode" on its page's <body> (its own setting, which defaults to the browser's
// prefers-color-scheme); the tab's iframe is on the same origin and watches that class. Opened on
// its own (no TensorBoard around it), the tab follows prefers-color-scheme.

export type Theme = "light" | "dark";

function hostBody(): HTMLElement | null {
  try {
    if (window.parent === window) return null;
    return window.parent.document.body;
  } catch {
    return null; // another origin: no access
  }
}

const media = (): MediaQueryList | null =>
  typeof window.matchMedia === "function" ? window.matchMedia("(prefers-color-scheme: dark)") : null;

export function detectTheme(): Theme {
  const body = hostBody();
  if (body) return body.classList.contains("dark-mode") ? "dark" : "light";
  return media()?.matches ? "dark" : "light";
}

let current: Theme = "light";

/** The theme the tab is drawn in now (charts read it when they are created). */
export function theme(): Theme {
  return current;
}

/** Applies ``detectTheme()`` to ``root`` and calls ``onChange`` whenever it changes after that. */
export function followTheme(root: HTMLElement, onChange: (t: Theme) => void): void {
  const apply = (): void => {
    const next = detectTheme();
    const changed = next !== current;
    current = next;
    root.classList.toggle("dark", next === "dark");
    document.documentElement.style.colorScheme = next;
    if (changed) onChange(next);
  };
  current = detectTheme();
  root.classList.toggle("dark", current === "dark");
  document.documentElement.style.colorScheme = current;
  const body = hostBody();
  if (body) new MutationObserver(apply).observe(body, { attributes: true, attributeFilter: ["class"] });
  else media()?.addEventListener("change", apply);
}

/** Colours the charts draw with (not data colours: phases, runs and layers keep theirs). */
export const INK = {
  get text(): string {
    return current === "dark" ? "#e0e0e0" : "#212121";
  },
  get muted(): string {
    return current === "dark" ? "#bdbdbd" : "#424242";
  },
  get line(): string {
    return current === "dark" ? "#90caf9" : "#1565c0";
  },
  get grid(): string {
    return current === "dark" ? "#3a3a3a" : "#eee";
  },
  get band(): string {
    return current === "dark" ? "#2a2a2a" : "#f7f7f7";
  },
};

/** The ECharts theme of dark mode: the page's background shows through, axes and text light. */
export const ECHARTS_DARK = (() => {
  const axis = {
    axisLine: { lineStyle: { color: "#757575" } },
    axisTick: { lineStyle: { color: "#757575" } },
    axisLabel: { color: "#bdbdbd" },
    splitLine: { lineStyle: { color: ["#3a3a3a"] } },
    nameTextStyle: { color: "#bdbdbd" },
  };
  return {
    backgroundColor: "transparent",
    textStyle: { color: "#e0e0e0" },
    categoryAxis: axis,
    valueAxis: axis,
    logAxis: axis,
    timeAxis: axis,
    dataZoom: { textStyle: { color: "#bdbdbd" }, borderColor: "#555", fillerColor: "rgba(144,202,249,0.15)" },
    visualMap: { textStyle: { color: "#e0e0e0" } },
  };
})();

/** Dark mode's CSS: the light style's surfaces, borders and text, turned down; tints kept as tints. */
export const DARK_STYLE = `
html:has(.tb-attn.dark), body:has(.tb-attn.dark) { background: #202124; }
.tb-attn.dark { color: #e0e0e0; background: #202124; }
.tb-attn.dark h4, .tb-attn.dark .chart-title, .tb-attn.dark .meta-line, .tb-attn.dark .legend,
.tb-attn.dark .legend .fit, .tb-attn.dark .findings-title { color: #e0e0e0; }
.tb-attn.dark .muted, .tb-attn.dark .hint, .tb-attn.dark .stat-label, .tb-attn.dark .loading,
.tb-attn.dark .toolbar label, .tb-attn.dark .chips, .tb-attn.dark .diagnostics, .tb-attn.dark .close { color: #a0a0a0; }
.tb-attn.dark a, .tb-attn.dark .link-button, .tb-attn.dark table.runs td.run-name,
.tb-attn.dark table.compare-table td.run-name a { color: #8ab4f8; }
.tb-attn.dark code { background: #303134; }
.tb-attn.dark select, .tb-attn.dark input, .tb-attn.dark .back, .tb-attn.dark .chip, .tb-attn.dark .more-runs button {
  background: #303134; border-color: #5f6368; color: #e0e0e0; }
.tb-attn.dark .back:hover, .tb-attn.dark .more-runs button:hover { background: #3c4043; }
.tb-attn.dark .rank-filter button.clear { background: #303134; border-color: #5f6368; color: #e0e0e0; }
.tb-attn.dark .rank-filter button.clear:hover:not(:disabled) { background: #3c4043; }
.tb-attn.dark .rank-filter button.clear:disabled { color: #757575; }
.tb-attn.dark .rank-filter-error { color: #f28b82; }
.tb-attn.dark .secondary { background: #303134; border-color: #fb8c00; color: #ffb74d; }
.tb-attn.dark .secondary:disabled { background: #303134; border-color: #5f6368; color: #757575; }
.tb-attn.dark .chip.on { background: rgba(251,140,0,.18); border-color: #fb8c00; color: #ffb74d; }
.tb-attn.dark .card, .tb-attn.dark .drill, .tb-attn.dark .empty, .tb-attn.dark .note { background: #292a2d; border-color: #3c4043; color: #e0e0e0; }
.tb-attn.dark .warn { background: rgba(255,224,130,.10); border-color: #7a6a2a; color: #ffe082; }
.tb-attn.dark .error { background: rgba(239,154,154,.12); border-color: #8c3b3b; color: #f28b82; }
.tb-attn.dark table.grid th, .tb-attn.dark table.grid td { border-bottom-color: #3c4043; }
.tb-attn.dark table.grid thead th { background: #292a2d; color: #e0e0e0; border-bottom-color: #5f6368; }
.tb-attn.dark table.runs tr.group th, .tb-attn.dark table.compare-table tr.group th { background: #2d2e31; color: #e0e0e0; border-bottom-color: #3c4043; }
.tb-attn.dark table.runs tr.run-row:hover, .tb-attn.dark table.runs tr.run-row:focus { background: rgba(251,140,0,.12); }
.tb-attn.dark table.compare-table tr.base-row, .tb-attn.dark .why-slower { background: rgba(242,142,43,.08); }
.tb-attn.dark .headline { background: rgba(89,161,79,.14); }
.tb-attn.dark .run-headline { background: rgba(251,140,0,.10); }
.tb-attn.dark .finding { background: #292a2d; }
.tb-attn.dark .finding .suggestion { color: #81c995; }
.tb-attn.dark .notes { color: #ffcc80; }
.tb-attn.dark .warn.stats-banner { border-color: #7a6a2a #7a6a2a #7a6a2a #f9a825; }
.tb-attn.dark .head-scatter { border-top-color: #3c4043; }
.tb-attn.dark .dot, .tb-attn.dark .dash-line { border-color: #bdbdbd; }
.tb-attn.dark .dot.filled { background: #bdbdbd; }
.tb-attn.dark .tabs { border-bottom-color: #5f6368; }
.tb-attn.dark .tab { color: #a0a0a0; }
.tb-attn.dark .tab:hover { color: #e0e0e0; }
.tb-attn.dark .tab.active { color: #ffb74d; border-bottom-color: #fb8c00; }
.tb-attn.dark .badge { background: #3c4043; color: #e0e0e0; }
.tb-attn.dark .badge.sev-high, .tb-attn.dark .status-error, .tb-attn.dark .badge.straggler { background: rgba(242,139,130,.18); color: #f28b82; }
.tb-attn.dark .badge.sev-medium, .tb-attn.dark .badge.baseline, .tb-attn.dark .badge.inferred { background: rgba(251,140,0,.18); color: #ffb74d; }
.tb-attn.dark .badge.core-only { background: rgba(240,98,146,.18); color: #f48fb1; }
.tb-attn.dark .badge.layer-local { background: rgba(77,182,172,.18); color: #80cbc4; }
.tb-attn.dark .badge.layer-global { background: rgba(149,117,205,.2); color: #b39ddb; }
.tb-attn.dark td.saved { color: #81c784; }
.tb-attn.dark .badge.sev-low, .tb-attn.dark .noisy { background: rgba(253,214,99,.14); color: #fdd663; }
.tb-attn.dark .status-ready { background: rgba(129,201,149,.16); color: #81c995; }
.tb-attn.dark .status-loading, .tb-attn.dark .badge.ranks { background: rgba(138,180,248,.16); color: #8ab4f8; }
.tb-attn.dark .status-running { background: rgba(197,138,249,.16); color: #d7aefb; }
.tb-attn.dark .backend-chip { background: rgba(138,180,248,.16); color: #aecbfa; }
.tb-attn.dark .badge.finding-id { background: #3c4043; color: #e0e0e0; }
.tb-attn.dark .meter { background: #3c4043; }
.tb-attn.dark .ratio { color: #a0a0a0; }
.tb-attn.dark .ratio.worse { color: #f28b82; }
.tb-attn.dark .ratio.better { color: #81c995; }
.tb-attn.dark .strategy-group { border-top-color: #3c4043; }
.tb-attn.dark table.strategies-table tr.base-row { background: rgba(242,142,43,.08); }
.tb-attn.dark table.strategies-table td.strategy a { color: #8ab4f8; }
.tb-attn.dark table.strategies-table td.not-measured { color: #8a8a8a; }
.tb-attn.dark table.strategies-table td.speedup.better { color: #81c995; }
.tb-attn.dark table.strategies-table td.speedup.worse { color: #f28b82; }
.tb-attn.dark .badge.approx { background: rgba(206,147,216,.18); color: #ce93d8; }
.tb-attn.dark .badge.pareto { background: rgba(138,180,248,.16); color: #8ab4f8; }
.tb-attn.dark ul.crossovers { color: #e0e0e0; }
.tb-attn.dark table.layers-table td.zero { color: #5f6368; }
.tb-attn.dark table.ranks-table tr.straggler-row { background: rgba(242,139,130,.08); }
.tb-attn.dark table.ranks-table tfoot tr.all-ranks th, .tb-attn.dark table.ranks-table tfoot tr.all-ranks td { background: #292a2d; }
.tb-attn.dark .drill tr.nested td { color: #a0a0a0; }
.tb-attn.dark .metric-caption, .tb-attn.dark table.ranks-table tr.col-groups th, .tb-attn.dark table.drill-tree .tw,
.tb-attn.dark table.drill-tree td.inputs, .tb-attn.dark table.runs td.fig .clock { color: #a0a0a0; }
.tb-attn.dark table.runs td.fig .spread, .tb-attn.dark table.runs td.fig.absent, .tb-attn.dark table.drill-tree tr.more td { color: #8a8a8a; }
.tb-attn.dark table.drill-tree tr.dev td.name { color: #d7aefb; }
.tb-attn.dark table.layers-table .module { color: #8a8a8a; }
.tb-attn.dark table.roof-table tbody tr:hover { background: rgba(251,140,0,.12); }
.tb-attn.dark table.roof-table tfoot th, .tb-attn.dark table.roof-table tfoot td { background: #292a2d; }
.tb-attn.dark .verdict.v-compute-bound { background: rgba(129,201,149,.16); color: #81c995; }
.tb-attn.dark .verdict.v-memory-bound { background: rgba(138,180,248,.16); color: #8ab4f8; }
.tb-attn.dark .verdict.v-latency-bound { background: rgba(197,138,249,.16); color: #d7aefb; }
.tb-attn.dark .verdict.v-above { background: rgba(242,139,130,.16); color: #f28b82; }
.tb-attn.dark .verdict.v-no { background: #3c4043; color: #bdbdbd; }
.tb-attn.dark .roof-symbol { color: #bdbdbd; }
`;
