// How the run header names a worker's spans (trace files): "span 2 · 12:03:41", its place among
// the worker's spans and when its file was written. The span is the number in the file name
// (tb_attn_plugin/vocab/names.py: worker.span.pt.trace.json), which tensorboard_trace_handler writes
// as the time since the epoch: nanoseconds in torch 2.x, milliseconds before. The raw number
// (19 digits) stays in the option's tooltip.

// A span read as a time must fall between 2015 and 2100 (ms since the epoch).
const EARLIEST_MS = Date.UTC(2015, 0, 1);
const LATEST_MS = Date.UTC(2100, 0, 1);

/** When the span's file was written, in ms since the epoch; null when the number reads as no time. */
export function spanTimeMs(span: string | null): number | null {
  if (span === null || !/^\d{1,25}$/.test(span)) return null;
  const n = Number(span);
  for (const perMs of [1e6, 1e3, 1, 1e-3]) {  // ns, µs, ms, s
    const ms = n / perMs;
    if (ms >= EARLIEST_MS && ms < LATEST_MS) return ms;
  }
  return null;
}

const pad = (n: number) => String(n).padStart(2, "0");
const day = (d: Date) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
const clock = (d: Date) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;

/**
 * The options of a worker's span selector, in its order: "span 1 · 12:03:41" (local time, with
 * the date where the spans were written on different days), "span 1" where the number is no
 * time; the tooltip gives the file and the raw number.
 */
export function spanOptions(spans: { span: string | null; file: string }[]): { value: string; label: string; title: string }[] {
  const times = spans.map((sp) => spanTimeMs(sp.span));
  const days = new Set(times.filter((t): t is number => t !== null).map((t) => day(new Date(t))));
  return spans.map((sp, i) => {
    const t = times[i];
    const when = t === null || t === undefined ? "" : ` \u00b7 ${days.size > 1 ? day(new Date(t)) + " " : ""}${clock(new Date(t))}`;
    return {
      value: sp.span ?? "",
      label: `span ${i + 1}${when}`,
      title: sp.span === null ? sp.file : `${sp.file} (span ${sp.span})`,
    };
  });
}
