// A serving engine's batches (WorkerSummary.serving, analysis/attribution/batch.py): the requests and tokens
// each engine iteration ran, the (query, key) pairs they attend and the KV cache, in the sentences
// the CLI prints too.

import { h } from "../dom";
import type { ServingBatch } from "../types";

/** The run header's serving box, or null for a trace without a serving engine's annotations. */
export function servingBox(s: ServingBatch | null | undefined): HTMLElement | null {
  if (!s || !s.sentences.length) return null;
  return h(
    "div",
    { class: "serving", dataset: { testid: "serving" } },
    h("b", null, "Serving batches"),
    h("ul", null, ...s.sentences.map((line) => h("li", null, line))),
  );
}
