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

/** A bandwidth in bytes per second, in the units of `fmtBytes`: "30.06 GiB/s". */
export function fmtBandwidth(bytesPerS: number | null | undefined): string {
  if (bytesPerS === null || bytesPerS === undefined || !Number.isFinite(bytesPerS)) return "\u2014";
  return `${fmtBytes(bytesPerS)}/s`;
}

/** Arithmetic intensity, FLOPs per byte, without its unit: "0.50", "9.14", "40.4", "183", "1.37 k". */
export function fmtIntensity(flopsPerByte: number | null | undefined): string {
  if (flopsPerByte === null || flopsPerByte === undefined || !Number.isFinite(flopsPerByte)) return "\u2014";
  const a = Math.abs(flopsPerByte);
  if (a === 0) return "0";
  if (a < 0.01) return flopsPerByte.toPrecision(2);
  return a < 1000 ? fixed(flopsPerByte) : si(flopsPerByte, "").trimEnd();
}

/** Integer operations (int8 GEMMs): "8.39 MIOP". */
export function fmtIops(iops: number | null | undefined): string {
  if (iops === null || iops === undefined || !Number.isFinite(iops)) return "\u2014";
  return iops === 0 ? "0" : si(iops, "IOP");
}

/** A ratio: "1.82×", "12.3×", "140×". */
export function fmtRatio(r: number | null | undefined): string {
  if (r === null || r === undefined || !Number.isFinite(r)) return "\u2014";
  return r >= 100 ? `${r.toFixed(0)}\u00d7` : r >= 10 ? `${r.toFixed(1)}\u00d7` : `${r.toFixed(2)}\u00d7`;
}

/** A relative error as a percentage, three significant digits: "20.6 %", "0.218 %", "< 0.001 %". */
export function fmtError(rel: number | null | undefined): string {
  if (rel === null || rel === undefined || !Number.isFinite(rel)) return "\u2014";
  if (rel === 0) return "0 %";
  const pct = rel * 100;
  if (pct < 0.001) return "< 0.001 %";
  return `${pct >= 100 ? pct.toFixed(0) : pct.toPrecision(3)} %`;
}

/** A change of the loss, signed: "+0.0030", "-0.0005", "+4.8e-6", "0". */
export function fmtLossDiff(d: number | null | undefined): string {
  if (d === null || d === undefined || !Number.isFinite(d)) return "\u2014";
  if (d === 0) return "0";
  return `${d > 0 ? "+" : ""}${Math.abs(d) < 1e-4 ? d.toExponential(1) : d.toFixed(4)}`;
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

// ---- kernel names -------------------------------------------------------------------------------

/** Launchers whose own name says little: a short name adds, in angle brackets, what they run. */
const LAUNCHERS = new Set([
  "elementwise_kernel", // ATen's TensorIterator launchers
  "vectorized_elementwise_kernel",
  "unrolled_elementwise_kernel",
  "reduce_kernel",
]);
/** Wrappers between a launcher and what it runs: looked through. */
const WRAPPERS = new Set(["gpu_kernel_impl", "gpu_kernel_impl_nocast", "BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "ReduceOp", "func_wrapper_t"]);
/** CUTLASS's launchers: the kernel is named by their template argument (`cutlass_80_tensorop_...`). */
const NAMED_BY_ARGUMENT = new Set(["Kernel", "Kernel2"]);
/** Template arguments that are numbers or plain types, never what a kernel runs. */
const PLAIN_ARG =
  /^(?:-?\d|true\b|false\b|\(|decltype\b|(?:(?:const|unsigned|signed|long|short)\s+)*(?:void|bool|char|short|int|long|float|double|half|__half|__nv_bfloat16|float2)\b|(?:c10|at|cutlass|std)::(?:Half|BFloat16|bfloat16_t|half_t|complex|array)\b|at::detail::Array\b)/;
const MAX_KERNEL_CHARS = 72;
const OPEN: Record<string, string> = { "<": ">", "(": ")", "{": "}", "[": "]" };

/** The index of the bracket that closes the one at `i`, or -1 when the text ends first (a clipped name). */
function closing(text: string, i: number): number {
  const stack: string[] = [];
  for (let k = i; k < text.length; k++) {
    const c = text[k]!;
    if (c in OPEN) stack.push(OPEN[c]!);
    else if (c === stack[stack.length - 1]) {
      stack.pop();
      if (!stack.length) return k;
    }
  }
  return -1;
}

/** `text` split at the commas outside brackets. */
function topLevelArgs(text: string): string[] {
  const out: string[] = [];
  let start = 0;
  for (let k = 0; k < text.length; k++) {
    const c = text[k]!;
    if (c in OPEN) {
      const end = closing(text, k);
      if (end < 0) break;
      k = end;
    } else if (c === ",") {
      out.push(text.slice(start, k).trim());
      start = k + 1;
    }
  }
  out.push(text.slice(start).trim());
  return out.filter(Boolean);
}

interface QualifiedName {
  parts: string[]; // the `::` parts, without template arguments
  args: string[]; // the last part's template arguments
  rest: string; // what follows a space after the name (the name after a return type), else ""
}

/** The qualified name at the start of a demangled signature. */
function qualifiedName(text: string): QualifiedName {
  const parts: string[] = [];
  let args: string[] = [];
  let cur = "";
  let rest = "";
  for (let i = 0; i < text.length; ) {
    const c = text[i]!;
    if (text.startsWith("::", i)) {
      parts.push(cur);
      cur = "";
      args = [];
      i += 2;
    } else if (c === "<" || c === "{") {
      const end = closing(text, i);
      if (c === "<") args = topLevelArgs(text.slice(i + 1, end < 0 ? undefined : end));
      else cur += text.slice(i, end < 0 ? undefined : end + 1); // {lambda(...)#1}
      if (end < 0) break;
      i = end + 1;
    } else if (c === "(") {
      if (text.startsWith("(anonymous namespace)", i)) {
        cur += "(anonymous namespace)";
        i += "(anonymous namespace)".length;
      } else if (cur === "operator" && text.startsWith("()", i)) {
        cur += "()";
        i += 2;
      } else break; // the parameter list
    } else if (c === " ") {
      rest = text.slice(i + 1).trim();
      break;
    } else if (c === ">" || c === ",") {
      break;
    } else {
      cur += c;
      i++;
    }
  }
  parts.push(cur);
  return { parts, args, rest };
}

/** The last part that names something (not `operator()`, a lambda or an anonymous namespace). */
function baseName(parts: string[]): string {
  for (let k = parts.length - 1; k >= 0; k--) {
    const p = parts[k]!;
    if (p && !p.startsWith("operator") && !p.startsWith("{") && !p.startsWith("(")) return p;
  }
  return "";
}

/** What a launcher runs: the first template argument that names something, wrappers looked through. */
function payload(args: string[], depth = 0): string {
  for (const arg of args) {
    if (PLAIN_ARG.test(arg)) continue;
    const q = qualifiedName(arg);
    const base = baseName(q.parts);
    if (!base) continue;
    return WRAPPERS.has(base) && depth < 6 ? payload(q.args, depth + 1) || base : base;
  }
  return "";
}

/**
 * A CUDA or ROCm kernel name as a person reads it. A demangled signature gives its base name,
 * without return type, namespaces, template arguments or parameters: `void at::native::
 * (anonymous namespace)::cunn_SoftMaxForward<4, float, ...>(...)` is `cunn_SoftMaxForward`.
 * ATen's generic launchers keep, in angle brackets, what they run (`vectorized_elementwise_kernel
 * <MulFunctor>`, `reduce_kernel<sum_functor>`, `elementwise_kernel<masked_fill_kernel>`);
 * CUTLASS's `Kernel<X>` and `Kernel2<X>` are named by X (`cutlass_80_tensorop_s1688gemm_...`),
 * and a base name of just `kernel` keeps its namespace (`gemvx::kernel`). A name without a
 * template or parameter list (`ampere_sgemm_128x64_tn`, an op name) or with words before it
 * (`Memcpy DtoD (Device -> Device)`) is kept. The result is cut to 72 characters; show the full
 * name beside it (a tooltip).
 */
export function shortKernelName(name: string): string {
  const full = name.trim();
  let text = full;
  const head = text.split("(anonymous namespace)").join("_");
  const bracket = head.search(/[<(]/);
  let short = full;
  if (bracket > 0 && !/\s/.test(head.slice(0, bracket).replace(/^void\s+/, ""))) {
    let q = qualifiedName(text);
    for (let k = 0; q.rest && k < 4; k++) q = qualifiedName((text = q.rest)); // a return type before the name
    const base = baseName(q.parts);
    if (NAMED_BY_ARGUMENT.has(base)) short = payload(q.args) || base;
    else if (LAUNCHERS.has(base)) short = `${base}<${payload(q.args) || "\u2026"}>`;
    else if (base === "kernel" && q.parts.length > 1) short = `${baseName(q.parts.slice(0, -1))}::kernel`;
    else if (base) short = base;
  }
  return short.length > MAX_KERNEL_CHARS ? `${short.slice(0, MAX_KERNEL_CHARS - 1)}\u2026` : short;
}
