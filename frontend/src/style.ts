// The tab's CSS, injected as one <style> element (TensorBoard's CSP allows inline styles).

export const STYLE = `
html, body { margin: 0; background: #fff; }
.tb-attn { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #212121; padding: 12px 16px 32px; }
.tb-attn * { box-sizing: border-box; }
.tb-attn h2 { font-size: 16px; font-weight: 600; margin: 0; }
.tb-attn h3 { font-size: 14px; font-weight: 600; margin: 0 0 6px; }
.tb-attn h4 { font-size: 12px; font-weight: 600; margin: 14px 0 4px; color: #424242; text-transform: uppercase; letter-spacing: .03em; }
.tb-attn code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f5f5f5; padding: 1px 4px; border-radius: 3px; }
.tb-attn a { color: #1565c0; }
.tb-attn select, .tb-attn input, .tb-attn button { font: inherit; color: inherit; }
.tb-attn select, .tb-attn input { border: 1px solid #ccc; border-radius: 3px; padding: 2px 4px; background: #fff; }
.tb-attn button { cursor: pointer; }
.muted { color: #757575; }
.small { font-size: 11px; }
.toolbar { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 14px; margin: 0 0 10px; }
.toolbar label { color: #616161; white-space: nowrap; }
.spacer { flex: 1; }
.filter { width: 320px; max-width: 100%; }
.error { border: 1px solid #ef9a9a; background: #ffebee; color: #b71c1c; padding: 6px 10px; border-radius: 4px; margin: 6px 0; white-space: pre-wrap; word-break: break-word; }
.warn { border: 1px solid #ffe082; background: #fff8e1; color: #5d4037; padding: 6px 10px; border-radius: 4px; margin: 6px 0; }
.note { border: 1px solid #e0e0e0; background: #fafafa; color: #424242; padding: 6px 10px; border-radius: 4px; margin: 6px 0; }
.loading { color: #757575; padding: 10px 0; }
.hint { color: #757575; font-size: 12px; margin: 4px 0 6px; }

table.grid { border-collapse: collapse; font-size: 12px; font-variant-numeric: tabular-nums; }
table.grid th, table.grid td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
table.grid thead th { font-weight: 600; color: #424242; background: #fafafa; border-bottom: 1px solid #ddd; position: sticky; top: 0; }
table.grid td.num, table.grid th.num { text-align: right; }
table.grid td.name { white-space: normal; word-break: break-all; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 11.5px; }
table.runs { width: 100%; }
table.runs tr.group th { background: #f5f5f5; color: #424242; font-weight: 600; padding-top: 8px; border-bottom: 1px solid #e0e0e0; }
table.runs tr.run-row { cursor: pointer; }
table.runs tr.run-row:hover, table.runs tr.run-row:focus { background: #fff3e0; outline: none; }
table.runs td.run-name { font-weight: 600; color: #1565c0; padding-left: 18px; }
table.runs tr.run-error td { color: #b71c1c; padding-left: 18px; white-space: normal; overflow-wrap: anywhere; border-bottom: 1px solid #eee; }
.badge { display: inline-block; font-size: 11px; line-height: 16px; padding: 0 6px; border-radius: 8px; background: #eee; color: #424242; margin-right: 4px; }
.status-ready { background: #e8f5e9; color: #1b5e20; }
.status-unloaded { background: #eceff1; color: #546e7a; }
.status-loading { background: #e3f2fd; color: #0d47a1; }
.status-error, .runner-failed, .runner-interrupted { background: #ffebee; color: #b71c1c; }
.runner-unsupported, .runner-running { background: #fff8e1; color: #6d4c41; }
.status-running { background: #ede7f6; color: #4527a0; }
.status-running::before { content: ""; display: inline-block; width: 6px; height: 6px; border-radius: 50%; background: #7e57c2; margin: 0 4px 1px 0; vertical-align: middle; }
table.runs tr.in-progress td.run-name { color: #5e35b1; }
.facets { display: inline-flex; flex-wrap: wrap; gap: 6px; }
.facets select.facet { max-width: 220px; }
.facets select.facet.on { border-color: #fb8c00; background: #fff3e0; }
.more-runs { margin: 8px 0 0; }
.more-runs button { border: 1px solid #ccc; background: #fff; border-radius: 3px; padding: 2px 10px; }
.more-runs button:hover { background: #f5f5f5; }
table.runs td.run-name { white-space: normal; overflow-wrap: anywhere; min-width: 120px; max-width: 320px; }
table.runs td.clip { max-width: 160px; overflow: hidden; text-overflow: ellipsis; }
table.runs td .badge { max-width: 160px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; vertical-align: middle; }
table.runs th.sortable { cursor: pointer; user-select: none; }
table.runs th.sortable:hover, table.runs th.sorted { color: #e65100; }
table.runs td.fig .clock { margin-left: 4px; font-size: 10px; color: #757575; }
table.runs td.fig .spread { display: block; font-size: 10px; line-height: 12px; color: #9e9e9e; }
table.runs td.fig.absent { color: #9e9e9e; }
.badge.ranks { background: #e3f2fd; color: #0d47a1; margin-left: 6px; }
.badge.inferred { background: #fff3e0; color: #e65100; border: 1px dashed #fb8c00; }
.badge.core-only { background: #fce4ec; color: #ad1457; border: 1px dashed #ec407a; }
td.fig .badge.core-only { margin: 0 0 0 4px; }
.badge.partial { background: #ede7f6; color: #4527a0; border: 1px dashed #7e57c2; cursor: help; }
td .badge.partial { margin: 0 0 0 4px; }
.partial-mark { margin-left: 2px; color: #4527a0; font-weight: 600; cursor: help; }
.badge.layer-local { background: #e0f2f1; color: #00695c; margin-left: 4px; }
.badge.layer-global { background: #ede7f6; color: #4527a0; margin-left: 4px; }
td.dense-work { color: #9e9e9e; font-style: italic; }
td.saved { color: #2e7d32; }
.empty { max-width: 720px; border: 1px solid #e0e0e0; border-radius: 6px; padding: 14px 18px; background: #fafafa; }
.empty li { margin: 4px 0; }

.run-top { gap: 8px 16px; }
.back { border: 1px solid #ccc; background: #fff; border-radius: 3px; padding: 2px 8px; }
.back:hover { background: #f5f5f5; }
.run-title { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; max-width: 50vw; }
.card { border: 1px solid #e0e0e0; border-radius: 6px; padding: 8px 12px; margin-bottom: 10px; background: #fff; }
.meta-line { color: #424242; margin-bottom: 6px; overflow-wrap: anywhere; }
.stats { display: flex; flex-wrap: wrap; gap: 6px 22px; align-items: center; }
.stat { display: inline-flex; align-items: center; gap: 6px; }
.stat-label { color: #757575; }
.backend-chip { font-weight: 600; background: #e8eaf6; color: #1a237e; border-radius: 3px; padding: 0 6px; }
.meter { display: inline-block; width: 80px; height: 8px; background: #eee; border-radius: 4px; overflow: hidden; }
.meter-fill { display: block; height: 100%; background: #fb8c00; }
.notes { margin: 6px 0 0; padding-left: 18px; color: #5d4037; }
.serving { margin: 8px 0 0; }
.serving ul { margin: 4px 0 0; padding-left: 18px; }
.findings { margin: 8px 0 0; }
.findings-title { font-weight: 600; margin: 4px 0; }
.finding { border-left: 3px solid #bbb; padding: 2px 8px; margin: 4px 0; background: #fafafa; }
.finding > summary { cursor: pointer; }
.finding p { margin: 4px 0; max-width: 1100px; }
.finding .suggestion { color: #1b5e20; }
.finding.sev-high { border-left-color: #c62828; }
.finding.sev-medium { border-left-color: #ef6c00; }
.finding.sev-low { border-left-color: #f9a825; }
.badge.sev-high { background: #ffebee; color: #b71c1c; }
.badge.sev-medium { background: #fff3e0; color: #e65100; }
.badge.sev-low { background: #fffde7; color: #8d6e00; }
.badge.sev-info { background: #eceff1; color: #455a64; }
.diagnostics { margin-top: 6px; color: #616161; }
.diagnostics ul { margin: 4px 0; }

.tabs { display: flex; gap: 2px; border-bottom: 1px solid #ddd; margin: 8px 0 10px; }
.tab { border: none; background: none; padding: 6px 12px; color: #616161; border-bottom: 2px solid transparent; margin-bottom: -1px; }
.tab:hover { color: #212121; }
.tab.active { color: #e65100; border-bottom-color: #f57c00; font-weight: 600; }
.chips { display: inline-flex; flex-wrap: wrap; gap: 4px; align-items: center; color: #616161; }
.chip { border: 1px solid #ccc; background: #fff; border-radius: 12px; padding: 0 8px; font-size: 12px; line-height: 20px; color: #424242; }
.chip.on { background: #fff3e0; border-color: #fb8c00; color: #e65100; }
.chart { width: 100%; min-height: 120px; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 12px; font-size: 12px; color: #424242; margin: 4px 0 8px; align-items: center; }
.legend-item { display: inline-flex; align-items: center; gap: 4px; }
.sw { display: inline-block; width: 12px; height: 12px; border-radius: 2px; }
.sw.measured { background: #fb8c00; }
.sw.derived { background: repeating-linear-gradient(135deg, rgba(251,140,0,.72) 0 3px, rgba(255,255,255,.8) 3px 5px); }
.table-wrap { overflow-x: auto; max-width: 100%; }
table.layers-table th.group-head { text-align: center; border-top: 3px solid #616161; border-left: 1px solid #e0e0e0; }
table.layers-table th.sortable { cursor: pointer; user-select: none; text-align: right; }
table.layers-table thead tr:first-child th.sortable { text-align: left; }
table.layers-table th.sortable:hover { color: #e65100; }
table.layers-table th.sorted { color: #e65100; }
table.layers-table td.cell { cursor: pointer; text-align: right; }
table.layers-table td.cell:hover { outline: 1px solid #fb8c00; outline-offset: -1px; }
table.layers-table td.zero { color: #bdbdbd; }
table.layers-table td.sel { outline: 2px solid #e65100; outline-offset: -2px; font-weight: 600; }
table.layers-table tr.sel-row th.row-head { color: #e65100; }
table.layers-table th.row-head { font-weight: 600; }
table.layers-table .module { color: #9e9e9e; font-weight: normal; font-size: 11px; }

.drill { border: 1px solid #e0e0e0; border-radius: 6px; padding: 8px 12px; margin-top: 14px; background: #fff; }
.drill-head { display: flex; align-items: center; justify-content: space-between; }
.close { border: none; background: none; font-size: 18px; line-height: 1; color: #757575; }
.close:hover { color: #212121; }
.trace-link { margin: 4px 0; }
.tree-tools { display: flex; align-items: baseline; gap: 8px; flex-wrap: wrap; margin: 10px 0 4px; }
.tree-tools h4 { margin: 0; }
table.drill-tree { width: 100%; }
table.drill-tree td.name { font-size: 11.5px; }
table.drill-tree .twisty { border: none; background: none; padding: 0; margin: 0; font: inherit; color: inherit; text-align: left; cursor: pointer; }
table.drill-tree .twisty:hover .op-name { text-decoration: underline; }
table.drill-tree .twisty:focus-visible { outline: 2px solid #fb8c00; outline-offset: 1px; }
table.drill-tree .tw { display: inline-block; width: 14px; color: #757575; }
table.drill-tree tr.dev td.name { color: #6a1b9a; }
table.drill-tree td.inputs { color: #757575; font-size: 11px; white-space: normal; min-width: 120px; }
table.drill-tree tr.more td { color: #9e9e9e; font-style: italic; }
.drill-kernels table { width: 100%; }
.kernel-name { cursor: help; }
.compare-bar { min-height: 26px; }
.primary { border: 1px solid #ef6c00; background: #fb8c00; color: #fff !important; border-radius: 3px; padding: 2px 12px; font-weight: 600; }
.primary:disabled { background: #eee; border-color: #ccc; color: #9e9e9e !important; cursor: default; }
.secondary { border: 1px solid #ef6c00; background: #fff; color: #e65100; border-radius: 3px; padding: 2px 12px; font-weight: 600; }
.secondary:hover:not(:disabled) { background: #fff3e0; }
.secondary:disabled { background: #eee; border-color: #ccc; color: #9e9e9e; cursor: default; }
.link-button { border: none; background: none; color: #1565c0; padding: 0; }
table.runs td.pick, table.runs th.pick { width: 24px; padding-right: 0; }
table.compare-table tr.group th { background: #f5f5f5; color: #424242; font-weight: 600; padding-top: 8px; }
table.compare-table tr.base-row { background: #fffaf2; }
table.compare-table td.run-name { font-weight: 600; white-space: normal; overflow-wrap: anywhere; min-width: 140px; }
.headlines { margin: 6px 0 10px; }
.headline { font-size: 14px; margin: 4px 0; padding: 6px 10px; background: #f1f8e9; border-left: 3px solid #59a14f; }
.why-slower { border-left: 3px solid #f28e2b; background: #fffaf2; padding: 4px 12px; margin: 10px 0; }
.why-slower h3 { font-size: 13px; margin: 4px 0; overflow-wrap: anywhere; }
.why-slower ul { margin: 4px 0; padding-left: 18px; }
table.compare-table td.run-name a { color: #1565c0; text-decoration: none; }
table.compare-table td.run-name a:hover { text-decoration: underline; }
.badge.baseline { background: #fff3e0; color: #e65100; margin-left: 6px; }
table.compare-table td.findings-cell { white-space: normal; min-width: 200px; }
.badge.finding-id { background: #eceff1; color: #37474f; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.ratio { display: inline-block; min-width: 46px; color: #757575; font-size: 11px; }
.ratio.worse { color: #c62828; font-weight: 600; }
.ratio.better { color: #2e7d32; font-weight: 600; }
.ratio.undecided { font-style: italic; }
.badge.unpaired { background: #eceff1; color: #455a64; margin-left: 6px; }
.scaling-charts { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 16px; }
.chart-title { font-weight: 600; color: #424242; margin: 4px 0 0; }
.legend .fit { color: #424242; font-variant-numeric: tabular-nums; }
@media (max-width: 900px) { .scaling-charts { grid-template-columns: minmax(0, 1fr); } }
.strategy-group { margin: 10px 0 22px; padding-top: 8px; border-top: 1px solid #e0e0e0; }
.strategy-group h3 { overflow-wrap: anywhere; }
table.strategies-table tr.base-row { background: #fffaf2; }
table.strategies-table td.strategy a { color: #1565c0; text-decoration: none; font-weight: 600; }
table.strategies-table td.strategy a:hover { text-decoration: underline; }
table.strategies-table td.strategy .badge { margin-left: 6px; }
table.strategies-table td.not-measured { color: #9e9e9e; font-style: italic; }
table.strategies-table td.speedup.better { color: #2e7d32; font-weight: 600; }
table.strategies-table td.speedup.worse { color: #c62828; }
.badge.approx { background: #f3e5f5; color: #6a1b9a; }
.badge.pareto { background: #e3f2fd; color: #0d47a1; }
.chart-tools { margin: 4px 0 0; }
ul.crossovers { margin: 2px 0 6px; padding-left: 0; list-style: none; font-size: 12px; color: #424242; }
ul.crossovers li { margin: 2px 0; }
.ranks h3 { margin: 16px 0 4px; }
.rank-filter { margin-top: -4px; }
.rank-filter input.rank-filter-input { width: 180px; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
.rank-filter button.clear { border: 1px solid #ccc; background: #fff; border-radius: 3px; padding: 2px 10px; }
.rank-filter button.clear:hover:not(:disabled) { background: #f5f5f5; }
.rank-filter button.clear:disabled { color: #9e9e9e; cursor: default; }
.rank-filter .hint { margin: 0; }
.rank-filter-error { color: #b71c1c; font-size: 12px; }
.stragglers ul { margin: 4px 0 2px; padding-left: 18px; }
.stragglers li { margin: 2px 0; }
.badge.straggler { background: #ffebee; color: #b71c1c; border: 1px solid #ef9a9a; margin-left: 6px; font-weight: 600; }
.stragglers li .badge.straggler { margin-left: 0; }
.stragglers .metric-line { margin: 4px 0 2px; font-size: 12px; }
.metric-caption { margin: 4px 0; font-size: 12px; color: #424242; }
.derived-note { max-width: 900px; white-space: normal; }
table.ranks-table tr.col-groups th { position: static; font-weight: 500; font-size: 11px; color: #757575; text-align: center; border-bottom: none; }
table.ranks-table tr.col-groups th.group { border-left: 1px solid #e0e0e0; border-right: 1px solid #e0e0e0; }
table.ranks-table thead th.judged { background: #fff3e0; }
table.ranks-table th.sortable { cursor: pointer; user-select: none; }
table.ranks-table th.sortable:hover, table.ranks-table th.sorted { color: #e65100; }
table.ranks-table th.num { text-align: right; }
table.ranks-table tbody th.row-head { font-weight: 600; }
table.ranks-table tr.straggler-row { background: #fff5f5; }
table.ranks-table tr.straggler-row th.row-head { box-shadow: inset 3px 0 0 #c62828; }
table.ranks-table td.slow { color: #b71c1c; font-weight: 600; }
table.ranks-table tfoot tr.all-ranks th, table.ranks-table tfoot tr.all-ranks td { background: #fafafa; }
table.ranks-table tfoot tr.all-ranks:first-child th, table.ranks-table tfoot tr.all-ranks:first-child td { border-top: 2px solid #bdbdbd; }
table.ranks-table .link-button { color: #1565c0; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 11.5px; }
table.ranks-table .link-button:hover { text-decoration: underline; }
.ranks-collectives table { min-width: 420px; }
.run-headline { font-size: 14px; margin: 2px 0 8px; padding: 6px 10px; background: #fff8ef; border-left: 3px solid #fb8c00; max-width: 1100px; }
.noisy { display: inline-block; margin-left: 6px; padding: 0 5px; border-radius: 3px; font-size: 11px; line-height: 16px; background: #fff8e1; color: #8d6e00; border: 1px dashed #f9a825; cursor: help; white-space: nowrap; }
td .noisy { margin-left: 3px; padding: 0 3px; }
.roof-peaks .meta-line { margin: 6px 0 0; }
table.roof-table tbody tr { cursor: pointer; }
table.roof-table tbody tr:hover { background: #fff3e0; }
table.roof-table tr.layer-row th, table.roof-table tr.layer-row td { font-weight: 600; border-bottom-color: #ccc; }
table.roof-table tfoot th, table.roof-table tfoot td { font-weight: 600; border-top: 2px solid #bdbdbd; background: #fafafa; }
table.roof-table tr.sel-row { outline: 2px solid #e65100; outline-offset: -2px; }
table.roof-table .sw, table.compare-table .sw.symbol { vertical-align: -1px; }
.verdict { display: inline-block; font-size: 11px; line-height: 16px; padding: 0 6px; border-radius: 8px; white-space: nowrap; }
.verdict.v-compute-bound { background: #e8f5e9; color: #1b5e20; }
.verdict.v-memory-bound { background: #e3f2fd; color: #0d47a1; }
.verdict.v-latency-bound { background: #f3e5f5; color: #6a1b9a; }
.verdict.v-above { background: #ffebee; color: #b71c1c; }
.verdict.v-no { background: #eceff1; color: #546e7a; }
.roof-diamond { display: inline-block; width: 9px; height: 9px; transform: rotate(45deg); margin: 0 2px; }
.roof-symbol { display: inline-block; width: 14px; text-align: center; color: #616161; }
.caveat { font-style: italic; margin: 2px 0 8px; }
.stats-banner { max-width: 1100px; }
.warn.stats-banner { border-width: 1px 1px 1px 4px; border-color: #f9a825; font-weight: 500; }
.mark-badge { display: inline-block; font-size: 10px; font-weight: 700; line-height: 12px; padding: 0 3px; border: 1px solid #212121; border-radius: 2px; background: #fff; color: #212121; }
.head-scatter { margin-top: 18px; padding-top: 8px; border-top: 1px solid #e0e0e0; }
.head-scatter .hint { max-width: 1100px; }
.dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; border: 2px solid #616161; }
.dot.filled { background: #616161; }
.dot.diamond { border-radius: 1px; transform: rotate(45deg) scale(.85); }
.dash-line { display: inline-block; width: 18px; border-top: 2px dashed #616161; }
.ramp { display: inline-block; width: 80px; height: 10px; border-radius: 2px; }
[hidden] { display: none !important; }
`;
