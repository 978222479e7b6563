// The timeline's model: one /timeline response turned into typed columns, lanes (a track's
// nesting levels) and colours, built once per load, and the bars to draw for a window, with
// events narrower than a pixel merged per lane.

import { layerColor, phaseColor, phaseLabel } from "../metrics";
import type { TimelineSlice } from "../types";

export const MAX_DEPTH = 24; // deeper events are not drawn (the count is shown)
const MIN_PX = 1; // narrower events are merged with their neighbours
export const GREY = "#bdbdbd";
const GREY_DARK = "#9e9e9e";

/** The response turned into typed columns, rows (lanes) and colours, built once per load. */
export class Model {
  readonly n: number;
  /** µs from the step's start. */
  readonly start: Float64Array;
  readonly dur: Float64Array;
  readonly lane: Int32Array;
  readonly color: Uint16Array;
  readonly colors: string[] = [];
  readonly laneNames: string[] = [];
  readonly laneTrack: number[] = [];
  /** Per lane: event indices by start, and the running maximum of their end times. */
  readonly laneEvents: Int32Array[] = [];
  readonly laneMaxEnd: Float64Array[] = [];
  readonly hidden: number;
  readonly phasesSeen = new Set<string>();
  readonly layersSeen = new Set<number>();
  /** 1: backward work of a layer that no backward work of that layer encloses (labelled "L1 bwd"). */
  readonly backwardTop: Uint8Array;

  constructor(readonly d: TimelineSlice) {
    const ev = d.events;
    const n = ev.start_us.length;
    this.n = n;
    this.start = Float64Array.from(ev.start_us, (t) => t - d.start_us);
    this.dur = Float64Array.from(ev.dur_us);
    this.lane = new Int32Array(n).fill(-1);
    this.color = new Uint16Array(n);

    // Lanes: each track gets one per depth level in use (up to MAX_DEPTH).
    const trackIndex = new Map<number, number>();
    d.tracks.forEach((t, i) => trackIndex.set(t.id, i));
    const depthOf = new Int32Array(d.tracks.length).fill(-1);
    for (let i = 0; i < n; i++) {
      const t = trackIndex.get(ev.track[i]!);
      if (t === undefined) continue;
      const dep = Math.min(ev.depth[i] ?? 0, MAX_DEPTH - 1);
      if (dep > depthOf[t]!) depthOf[t] = dep;
    }
    const laneBase = new Int32Array(d.tracks.length);
    d.tracks.forEach((t, i) => {
      laneBase[i] = this.laneNames.length;
      const depth = depthOf[i]!;
      for (let k = 0; k <= Math.max(0, depth); k++) {
        this.laneNames.push(k === 0 ? t.name : "");
        this.laneTrack.push(i);
      }
    });
    const counts = new Int32Array(this.laneNames.length);
    let hidden = 0;
    for (let i = 0; i < n; i++) {
      const t = trackIndex.get(ev.track[i]!);
      const dep = ev.depth[i] ?? 0;
      if (t === undefined || dep >= MAX_DEPTH) {
        hidden++;
        continue;
      }
      const lane = laneBase[t]! + dep;
      this.lane[i] = lane;
      counts[lane]!++;
    }
    this.hidden = hidden;
    for (let l = 0; l < counts.length; l++) this.laneEvents.push(new Int32Array(counts[l]!));
    const fill = new Int32Array(counts.length);
    for (let i = 0; i < n; i++) {
      const lane = this.lane[i]!;
      if (lane >= 0) this.laneEvents[lane]![fill[lane]!++] = i;
    }
    // The server sorts by track then start; sort again per lane in case it did not.
    for (let l = 0; l < this.laneEvents.length; l++) {
      const idx = this.laneEvents[l]!;
      let sorted = true;
      for (let k = 1; k < idx.length; k++) if (this.start[idx[k]!]! < this.start[idx[k - 1]!]!) sorted = false;
      if (!sorted) idx.sort((a, b) => this.start[a]! - this.start[b]!);
      const maxEnd = new Float64Array(idx.length);
      let m = -Infinity;
      for (let k = 0; k < idx.length; k++) {
        const e = idx[k]!;
        m = Math.max(m, this.start[e]! + this.dur[e]!);
        maxEnd[k] = m;
      }
      this.laneMaxEnd.push(maxEnd);
    }

    // Colours: phase colour for events in a phase, layer colour for events in a block but in no
    // phase, grey outside attention; scopes and kernels full strength, ops nested in them lighter.
    const colorIds = new Map<string, number>();
    const colorId = (c: string) => {
      let id = colorIds.get(c);
      if (id === undefined) {
        id = this.colors.length;
        this.colors.push(c);
        colorIds.set(c, id);
      }
      return id;
    };
    for (let i = 0; i < n; i++) {
      const layer = ev.layer[i] ?? -1;
      const ph = ev.phase[i] ?? -1;
      const kind = kindOf(d, i);
      const strong = kind === "annotation" || kind === "kernel" || kind === "memcpy" || kind === "memset";
      let c: string;
      if (layer < 0) c = strong ? GREY_DARK : GREY;
      else {
        this.layersSeen.add(layer);
        const phase = ph >= 0 ? d.phases[ph] : undefined;
        if (phase !== undefined) {
          this.phasesSeen.add(phase);
          c = phaseColor(phase);
        } else c = layerColor(layer);
        if (!strong) c = lighten(c, 0.45);
      }
      this.color[i] = colorId(c);
    }

    // The outermost of each layer's backward nests: the events arrive by track, then start, then
    // longest first, so an event's parent is the latest event one level up on its track.
    this.backwardTop = new Uint8Array(n);
    const open = new Map<number, number[]>();
    const backward = (i: number) => !!(ev.backward ?? [])[i];
    for (let i = 0; i < n; i++) {
      const track = ev.track[i]!;
      const dep = ev.depth[i] ?? 0;
      let stack = open.get(track);
      if (!stack) open.set(track, (stack = []));
      stack.length = Math.min(stack.length, dep);
      const parent = dep > 0 && stack.length === dep ? stack[dep - 1]! : -1;
      stack[dep] = i;
      const layer = ev.layer[i] ?? -1;
      if (layer >= 0 && backward(i) && !(parent >= 0 && backward(parent) && ev.layer[parent] === layer)) this.backwardTop[i] = 1;
    }
  }

  /**
   * A bar's text: attention scopes read "L3 softmax" (or "L3 attention"), the outermost of a
   * layer's backward work "L3 bwd softmax" (the autograd function's name is in the tooltip),
   * everything else its name.
   */
  label(e: number): string {
    const ev = this.d.events;
    const layer = ev.layer[e] ?? -1;
    const top = this.backwardTop[e] === 1;
    if (layer >= 0 && (top || kindOf(this.d, e) === "annotation")) {
      const ph = ev.phase[e] ?? -1;
      const phase = ph >= 0 ? this.d.phases[ph] : undefined;
      const what = phase !== undefined ? phaseLabel(phase) : top ? "" : "attention";
      return `L${layer}${top ? " bwd" : ""}${what ? " " + what : ""}`;
    }
    return this.d.names[ev.name[e]!] ?? "";
  }

  /** Bars for the window [t0, t1] at `pxPerUs`: [lane, start, end, event, merged count]. */
  visible(t0: number, t1: number, pxPerUs: number): number[][] {
    const out: number[][] = [];
    const minUs = MIN_PX / pxPerUs;
    for (let lane = 0; lane < this.laneEvents.length; lane++) {
      const idx = this.laneEvents[lane]!;
      const maxEnd = this.laneMaxEnd[lane]!;
      // First event whose end (running max) reaches the window.
      let lo = 0;
      let hi = idx.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (maxEnd[mid]! < t0) lo = mid + 1;
        else hi = mid;
      }
      let cFirst = -1;
      let cStart = 0;
      let cEnd = 0;
      let cCount = 0;
      const flush = () => {
        if (cFirst >= 0) out.push([lane, cStart, Math.max(cEnd, cStart + minUs), cFirst, cCount]);
        cFirst = -1;
      };
      for (let k = lo; k < idx.length; k++) {
        const e = idx[k]!;
        const s = this.start[e]!;
        if (s > t1) break;
        const end = s + this.dur[e]!;
        if (end < t0) continue;
        if (end - s >= minUs) {
          flush();
          out.push([lane, s, end, e, 1]);
        } else if (cFirst >= 0 && s - cEnd < minUs && end - cStart < 3 * minUs && this.color[e] === this.color[cFirst]) {
          cEnd = Math.max(cEnd, end);
          cCount++;
        } else {
          flush();
          cFirst = e;
          cStart = s;
          cEnd = end;
          cCount = 1;
        }
      }
      flush();
    }
    return out;
  }
}

export function kindOf(d: TimelineSlice, i: number): string {
  const k = d.events.kind[i] as unknown;
  return typeof k === "string" ? k : "other";
}

function lighten(hex: string, amount: number): string {
  const n = parseInt(hex.slice(1), 16);
  const mix = (c: number) => Math.round(c + (255 - c) * amount);
  const r = mix((n >> 16) & 255);
  const g = mix((n >> 8) & 255);
  const b = mix(n & 255);
  return `#${((1 << 24) | (r << 16) | (g << 8) | b).toString(16).slice(1)}`;
}
