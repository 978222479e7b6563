// Entry point. TensorBoard loads this module in the tab's iframe (whose <base> is
// plugin/tb_attn/) and calls render().

import { App } from "./app";
import { h } from "./dom";
import { STYLE } from "./style";
import { DARK_STYLE, followTheme } from "./theme";

// Exported for the browser tests, which check the rule on real kernel names in the page.
export { shortKernelName } from "./format";

interface HostMessage {
  type?: string;
  id?: number;
  payload?: unknown;
  error?: unknown;
  isReply?: boolean;
}

/** Registers for TensorBoard's messages; a DataReloaded message refreshes the tab. */
function listenForReloads(app: App): void {
  if (window.parent === window) return; // opened on its own, not inside TensorBoard
  const channel = new MessageChannel();
  const port = channel.port1;
  port.onmessage = (ev: MessageEvent) => {
    let msg: HostMessage;
    try {
      msg = typeof ev.data === "string" ? (JSON.parse(ev.data) as HostMessage) : (ev.data as HostMessage);
    } catch {
      return;
    }
    if (!msg || msg.isReply) return;
    const reply = () =>
      port.postMessage(JSON.stringify({ type: msg.type, id: msg.id, payload: null, error: null, isReply: true }));
    if (msg.type === "experimental.DataReloaded") {
      app.reload().finally(reply);
    } else {
      reply();
    }
  };
  port.start();
  window.parent.postMessage("experimental.bootstrap", "*", [channel.port2]);
}

export function render(): void {
  const style = document.createElement("style");
  style.textContent = STYLE + DARK_STYLE;
  document.head.appendChild(style);
  const root = h("div", "tb-attn");
  document.body.appendChild(root);
  let app: App | null = null;
  followTheme(root, () => app?.retheme()); // before the first chart: charts take the theme at creation
  app = new App(root);
  listenForReloads(app);
  app.start();
}
