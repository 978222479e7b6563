// A small element builder. Text always goes in as text nodes: strings from traces (op, kernel
// and run names, metadata) must never be parsed as HTML.

export type Child = Node | string | number | null | undefined | false;

export interface Attrs {
  class?: string;
  title?: string;
  on?: { [K in keyof HTMLElementEventMap]?: (ev: HTMLElementEventMap[K]) => void };
  dataset?: Record<string, string>;
  style?: Partial<Record<string, string>>;
  attrs?: Record<string, string | number | boolean | null | undefined>;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Attrs | string | null = null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (typeof props === "string") {
    el.className = props;
  } else if (props) {
    if (props.class) el.className = props.class;
    if (props.title !== undefined) el.title = props.title;
    if (props.dataset) for (const [k, v] of Object.entries(props.dataset)) el.dataset[k] = v;
    if (props.style) for (const [k, v] of Object.entries(props.style)) if (v !== undefined) el.style.setProperty(k, v);
    if (props.attrs) {
      for (const [k, v] of Object.entries(props.attrs)) {
        if (v === null || v === undefined || v === false) continue;
        el.setAttribute(k, v === true ? "" : String(v));
      }
    }
    if (props.on) {
      for (const [k, fn] of Object.entries(props.on)) if (fn) el.addEventListener(k, fn as EventListener);
    }
  }
  append(el, ...children);
  return el;
}

export function append(parent: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    parent.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Node): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

export function replace(el: Node, ...children: Child[]): void {
  clear(el);
  append(el, ...children);
}

/** A <select> with text options (and their tooltips); options with a `group` go in an
 * <optgroup> of that label, consecutive ones together. */
export function select(
  options: { value: string; label: string; title?: string; group?: string }[],
  value: string,
  onChange: (value: string) => void,
  label?: string,
): HTMLSelectElement {
  const el = h("select", { attrs: { "aria-label": label ?? null } });
  let group: HTMLOptGroupElement | null = null;
  for (const o of options) {
    const opt = h("option", o.title ? { title: o.title } : null, o.label);
    opt.value = o.value;
    if (o.group === undefined) group = null;
    else if (!group || group.label !== o.group) {
      group = h("optgroup", { attrs: { label: o.group } });
      el.appendChild(group);
    }
    (group ?? el).appendChild(opt);
  }
  el.value = value;
  el.addEventListener("change", () => onChange(el.value));
  return el;
}
