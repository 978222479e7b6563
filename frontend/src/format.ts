// Number formatting for times (µs), bytes, FLOPs and shares.

function fixed(value: number): string {
  const a = Math.abs(value);
  return a >= 100 ? value.toFixed(0) : a >= 10 ? value.toFixed(1) : value.toFixed(2);
}

export function fmtUs(us: number | null | undefined): string {
  if (us === null || us === undefined || !Number.isFinite(us)) return "\u2014";
  const a = Math.abs(us);
  if (a === 0) return "0";
  if (a < 1000) return `${fixed(us)} \u00b5s`;
  if (a < 1e6) return `${fixed(us / 1e3)} ms`;
  return `${fixed(us / 1e6)} s`;
}

/** A time in ms without the unit, for a column headed "(ms)": one unit down the column. */
export function fmtMs(us: number | null | undefined): string {
  if (us === null || us === undefined || !Number.isFinite(us)) return "\u2014";
  return us === 0 ? "0" : fixed(us / 1e3);
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function fmtBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) return "\u2014";
  let v = bytes;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${Math.round(v)} B` : `${fixed(v)} ${BYTE_UNITS[i]}`;
}

const SI = ["", "k", "M", "G", "T", "P", "E"];

function si(value: number, unit: string): string {
  let v = value;
  let i = 0;
  while (Math.abs(v) >= 1000 && i < SI.length - 1) {
    v /= 1000;
    i++;
  }
  return `${i === 0 ? String(Math.round(v)) : fixed(v)} ${SI[i]}${unit}`;
}

export function fmtFlops(flops: number | null | undefined): string {
  if (flops === null || flops === undefined || !Number.isFinite(flops)) return "\u2014";
  return flops === 0 ? "0" : si(flops, "FLOP");
}

export function fmtRate(flopsPerS: number | null | undefined): string {
  if (flopsPerS === null || flopsPerS === undefined || !Number.isFinite(flopsPerS)) return "\u2014";
  return flopsPerS === 0 ? "0" : si(flopsPerS, "FLOP/s");
}

export function fmtShare(share: number | null | undefined): string {
  if (share === null || share === undefined || !Number.isFinite(share)) return "\u2014";
  return `${(share * 100).toFixed(1)} %`;
}

export function fmtCount(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "\u2014";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

/** An ISO 8601 time as local "YYYY-MM-DD HH:MM"; the input itself when it does not parse. */
export function fmtWhen(iso: string): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const d = new Date(t);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}
